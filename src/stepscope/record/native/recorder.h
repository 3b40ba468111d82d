/* stepscope.record.native._native: the recorder's state, shared by its parts (recorder.c defines it).

   A traced call of a plain function is pushed on its thread's own stack (Frame: span id, parent id, code index,
   start ns) when it starts and popped when it ends, which writes one finished record (Rec) into preallocated
   columns. No Python object is made per call; the clock (CLOCK_MONOTONIC, which is time.perf_counter_ns on
   Linux) is read once per event. The push and the pop are the hot path: they are inline here, so that the
   sys.monitoring callbacks (monitor.c) and the 3.11 Probe objects (probes.c) compile them in place.

   Nesting with the spans kept in the Python ContextVar (spans.buffer.current_span: stepscope.span, wrappers,
   step-level probes): span ids come from one counter (last_sid), so of the two innermost open spans (this thread's
   native one, the ContextVar's) the one with the larger id is the inner one: the parent. A ContextVar value is an
   open-span record, a list whose fields are at the REC_* indices of layout.h (spans/record.py).

   The GIL serialises everything here; a free-threaded build is refused at build time. Everything declared here is
   internal to the extension (hidden: never exported from the .so, accessed without the GOT). */

#ifndef STEPSCOPE_NATIVE_RECORDER_H
#define STEPSCOPE_NATIVE_RECORDER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "layout.h"

#ifdef Py_GIL_DISABLED
#error "stepscope.record.native._native needs the GIL (the pure-Python recorder serves free-threaded builds)"
#endif

#if PY_VERSION_HEX >= 0x030C0000
#define REQUEST_EXTRA PyUnstable_Eval_RequestCodeExtraIndex
#define GET_EXTRA PyUnstable_Code_GetExtra
#define SET_EXTRA PyUnstable_Code_SetExtra
#else
#define REQUEST_EXTRA _PyEval_RequestCodeExtraIndex
#define GET_EXTRA _PyCode_GetExtra
#define SET_EXTRA _PyCode_SetExtra
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* one open call on a thread's stack */
typedef struct {
    int64_t sid, parent, start, step; /* step: the denoising step of a nested denoiser call, else -1 */
    int32_t idx;
    PyObject *err; /* the exception type seen by error() (3.11), a strong reference, or NULL */
} Frame;

/* a thread's stack of open native calls; every thread's is linked in `states` (open_spans reads another's) */
typedef struct TState {
    Frame *stack;
    Py_ssize_t depth, cap;
    unsigned long tid;
    struct TState *prev, *next;
} TState;

/* one finished call: 64 bytes, one cache line (the pop of a call writes one line, not eight) */
typedef struct {
    int64_t sid, parent, start, end, step; /* parent 0: none; step -1: none */
    unsigned long tid;
    PyObject *err; /* the exception type, a strong reference, or NULL */
    int32_t idx;
} Rec;

/* the Python callbacks of codes with Python probes (monitor.c), by event */
enum { EV_START, EV_RESUME, EV_RETURN, EV_YIELD, EV_THROW, EV_UNWIND, EV_COUNT };

extern __thread TState *tls;          /* this thread's state, or NULL before its first call */
extern pthread_mutex_t states_lock;
extern TState *states;                /* every thread's state */

extern Rec *recs;                     /* finished calls, in the order they ended */
extern Py_ssize_t n_fin, cap_fin;
extern Py_ssize_t max_fin;            /* spans.buffer.MAX_PENDING: past it new spans are dropped */
extern int64_t dropped;

extern int64_t last_sid;              /* the last span id given (one sequence with the Python recorder's) */
extern PyObject *names;               /* list: code index -> (name, op) */
extern PyObject *probe_objs;          /* list: code index -> the Python Probe (a generator record's probe field) */
extern char *gen_flags;               /* code index -> its kind: 0 plain, 1 generator/coroutine, 2 denoiser */
extern Py_ssize_t cap_flags;
extern PyObject *parked;              /* dict: frame address -> the record of a suspended generator frame */
extern PyObject *parked_gen;          /* 3.13+, dict: frame address -> (weakref to its generator, bytearray: int64 last
                                         suspension ns, uint64 thread id) (tracing.probes.end_closed) */
extern PyObject *orphans;             /* 3.13+, list: (record, note) of such frames freed before end_closed saw them */
extern PyObject *current_span;        /* the ContextVar */
extern PyObject *error_name;          /* exception type -> "module.Qualname" */
extern PyObject *disable;             /* sys.monitoring.DISABLE */
extern PyObject *denoisers;           /* set: the Python probes of denoiser codes (their records carry the step) */
extern PyObject *step_key, *nested_key; /* "diffusion.step", "diffusion.nested" */
extern PyObject *forward[EV_COUNT];   /* the Python callbacks (set_forward), or NULL */
extern Py_ssize_t extra_index;        /* the co_extra slot: 0 untraced, 1 a Python probe, 2 + index a native code */
extern int call_wake_on;              /* a resting recorder waits: the next traced call to start wakes it */
extern int64_t call_wakes;            /* ... how many times one did */
extern timer_t call_wake_timer;       /* ... the timer it arms (cpuwake.CpuWake's wake) */
extern int64_t call_wake_t;           /* ... when the last one did (CLOCK_MONOTONIC ns, before its span's start) */
extern unsigned long call_wake_tid;   /* ... in which thread (threading.get_ident()): it ran then (threads.c) */

/* The resting recorder thread woken (its CpuWake timer armed to expire at once) and call_wake_on cleared:
   the first traced call to start during a rest (recorder.c, py_call_wake in module.c). */
void fire_call_wake(void);

/* The state's tables and the thread key; 0, or -1 with an exception set. Once, at module init. */
int recorder_init(void);

/* This thread's new state (linked in `states`, its key set), or NULL when out of memory. */
TState *new_state(void);

/* The finished columns doubled (up to max_fin); 0, or -1 when full or out of memory. */
int grow_fin(void);

/* The denoising step of the innermost open denoiser call of this thread (a nested one here, else a record in the
   ContextVar made by a denoiser's Python probe), or -1 when no denoiser call is open. */
int64_t open_step(void);

/* Whether the innermost open call of this thread is a nested call of denoiser index idx recorded here (not one of
   its Python probe's, whose record in the ContextVar is then the newer). */
int native_top(int32_t idx);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* the span id of the ContextVar's open span (0: none) */
static inline int64_t cv_top(void) {
    PyObject *v = NULL;
    int64_t sid = 0;
    if (PyContextVar_Get(current_span, NULL, &v) < 0) { PyErr_Clear(); return 0; }
    if (v != NULL) {
        if (PyList_CheckExact(v) && PyList_GET_SIZE(v) > REC_ID) {
            PyObject *s = PyList_GET_ITEM(v, REC_ID);
            if (PyLong_CheckExact(s)) sid = PyLong_AsLongLong(s);
        }
        Py_DECREF(v);
    }
    return sid;
}

/* a call of code index idx starts (step: its denoising step, or -1) */
static inline void push_step(int32_t idx, int64_t step) {
    TState *t = tls;
    if (t == NULL && (t = new_state()) == NULL) return;
    if (t->depth == t->cap) {
        Frame *s = (Frame *)realloc(t->stack, sizeof(Frame) * t->cap * 2);
        if (s == NULL) return;
        t->stack = s;
        t->cap *= 2;
    }
    if (__builtin_expect(call_wake_on, 0)) fire_call_wake(); /* (one load a call: a step begins, end a rest) */
    int64_t parent = t->depth ? t->stack[t->depth - 1].sid : 0;
    int64_t outer = cv_top();
    Frame *f = &t->stack[t->depth++];
    f->sid = ++last_sid;
    f->parent = outer > parent ? outer : parent;
    f->idx = idx;
    f->err = NULL;
    f->step = step;
    f->start = now_ns();
}

#define push(idx) push_step(idx, -1)

/* the call of code index idx ends (exception type err, borrowed, or NULL) */
static inline void pop(int32_t idx, PyObject *err) {
    int64_t end = now_ns();
    TState *t = tls;
    if (t == NULL || t->depth == 0) return;
    Py_ssize_t d = t->depth - 1;
    while (d >= 0 && t->stack[d].idx != idx) d--; /* above it: calls whose end was not seen (untraced meanwhile) */
    if (d < 0) return;                            /* a call that started before it was traced */
    Frame *f = &t->stack[d];
    for (Py_ssize_t i = d + 1; i < t->depth; i++) Py_XDECREF(t->stack[i].err);
    t->depth = d;
    PyObject *e = f->err != NULL ? f->err : err;
    if (e != NULL && e != f->err) Py_INCREF(e);
    if (n_fin == cap_fin && grow_fin() < 0) {
        dropped++;
        Py_XDECREF(e);
        return;
    }
    Py_ssize_t i = n_fin++;
    recs[i].sid = f->sid;
    recs[i].parent = f->parent;
    recs[i].idx = f->idx;
    recs[i].start = f->start;
    recs[i].end = end;
    recs[i].step = f->step;
    recs[i].tid = t->tid;
    recs[i].err = e;
}

/* a code object's co_extra value (0: untraced, 1: a Python probe's, 2 + index: a native code) */
static inline intptr_t extra_of(PyObject *code) {
    void *x = NULL;
    if (extra_index < 0 || GET_EXTRA(code, extra_index, &x) < 0) { PyErr_Clear(); return 0; }
    return (intptr_t)x;
}

#endif
