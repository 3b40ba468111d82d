/* stepscope.record._native: the tracer's hot path in C (issue 31).

   A traced call of a plain function (no hooks, no subclass filter, not a generator or coroutine) is recorded
   here: its start pushes (span id, parent id, code index, start ns) on the thread's own stack, its end pops it
   and writes one fixed-size record into preallocated columns (span id, parent id, code index, start, end,
   thread, exception type). No Python object is made per call; the clock (CLOCK_MONOTONIC, which is
   time.perf_counter_ns on Linux) is read once per event. The recorder thread drains the columns (take) into
   span tuples of tracing.buffer.SPAN_FIELDS.

   Python 3.12+: mon_start/mon_return/mon_unwind/... are the sys.monitoring callbacks themselves (PEP 669). A
   code object's co_extra slot tells whose it is: 0 not traced, 1 a Python probe (the call is handed to the
   Python callback registered with set_forward), 2 + index a native one.
   Python 3.11: the instrumented code calls a Probe object's enter/error/exit (tracing.codeswap).

   Generators, coroutines and async generators (3.12+, registered with generator=True): their records are the
   Python recorder's own (tracing.probes: a list [span id, start ns, parent id, probe, attrs, name, error type,
   restore] made current in the ContextVar, so that nesting follows each asyncio task's context); at PY_YIELD the
   record is parked by frame address and the caller's value put back, at PY_RESUME/PY_THROW it is current again,
   at PY_RETURN/PY_UNWIND it ends as one record in the columns. The same steps as tracing.probes.Probe, without
   a Python frame per event.

   Nesting with the spans kept in the Python ContextVar (tracing.buffer.current_span: stepscope.span,
   wrappers, step-level probes): span ids come from one counter (next_id), so of the two innermost open spans
   (this thread's native one, the ContextVar's) the one with the larger id is the inner one: the parent.
   Denoisers (code kind 2: the forward of a traced diffusers UNet or transformer without a device mirror, see
   steps.hooks): a call inside an open denoiser call (a UNet's blocks, the transformers in them) is part of that
   call's denoising step; it is recorded here with the step, which take() writes into the span's attrs
   (diffusion.step, diffusion.nested). Any other call of such code (the outermost denoiser: its step is counted,
   its memory read) is handed to its Python probe.
   The GIL serialises everything here; a free-threaded build is refused at build time. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#ifdef Py_GIL_DISABLED
#error "stepscope.record._native needs the GIL (the pure-Python recorder serves free-threaded builds)"
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

typedef struct {
    int64_t sid, parent, start, step; /* step: the denoising step of a nested denoiser call, else -1 */
    int32_t idx;
    PyObject *err; /* the exception type seen by error() (3.11), a strong reference, or NULL */
} Frame;

typedef struct TState {
    Frame *stack;
    Py_ssize_t depth, cap;
    unsigned long tid;
    struct TState *prev, *next;
} TState;

static __thread TState *tls = NULL;
static pthread_key_t tls_key;
static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
static TState *states = NULL; /* every thread's state (open_spans reads another thread's stack) */

/* finished calls, in the order they ended */
typedef struct { /* one finished call: 64 bytes, one cache line (the pop of a call writes one line, not eight) */
    int64_t sid, parent, start, end, step; /* parent 0: none; step -1: none */
    unsigned long tid;
    PyObject *err; /* the exception type, a strong reference, or NULL */
    int32_t idx;
} Rec;
_Static_assert(sizeof(Rec) == 64, "a finished call is one cache line");
static Rec *recs = NULL;
static Py_ssize_t n_fin = 0, cap_fin = 0;
static Py_ssize_t max_fin = 1000000; /* tracing.buffer.MAX_PENDING: past it new spans are dropped */
static int64_t dropped = 0;

static int64_t last_sid = 0;
static PyObject *names = NULL;        /* list: index -> (name, op) */
static PyObject *probe_objs = NULL;   /* list: index -> the Python Probe (a generator record's probe slot) */
static char *gen_flags = NULL;        /* index -> its kind: 0 plain, 1 generator/coroutine, 2 denoiser */
static Py_ssize_t cap_flags = 0;
static PyObject *parked = NULL;       /* dict: frame address -> the record of a suspended generator frame */
static PyObject *parked_gen = NULL;   /* 3.13+, dict: frame address -> (weakref to its generator, bytearray: int64 last
                                         suspension ns, uint64 thread id) (tracing.probes.end_closed) */
static PyObject *orphans = NULL;      /* 3.13+, list: (record, note) of such frames freed before end_closed saw them */
static PyObject *current_span = NULL; /* the ContextVar */
static PyObject *error_name = NULL;   /* exception type -> "module.Qualname" */
static PyObject *disable = NULL;      /* sys.monitoring.DISABLE */
static PyObject *denoisers = NULL;    /* set: the Python probes of denoiser codes (their records carry the step) */
static PyObject *step_key = NULL, *nested_key = NULL; /* "diffusion.step", "diffusion.nested" */
static PyObject *forward[6];          /* Python callbacks for codes with Python probes, by event below */
enum { EV_START, EV_RESUME, EV_RETURN, EV_YIELD, EV_THROW, EV_UNWIND };
static Py_ssize_t extra_index = -1;

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void free_state(void *p) {
    /* at a thread's exit (no GIL): unlink its state */
    TState *t = (TState *)p;
    pthread_mutex_lock(&states_lock);
    if (t->prev) t->prev->next = t->next; else states = t->next;
    if (t->next) t->next->prev = t->prev;
    pthread_mutex_unlock(&states_lock);
    free(t->stack);
    free(t);
}

static TState *new_state(void) {
    TState *t = (TState *)calloc(1, sizeof(TState));
    if (t == NULL) return NULL;
    t->cap = 64;
    t->stack = (Frame *)malloc(sizeof(Frame) * t->cap);
    if (t->stack == NULL) { free(t); return NULL; }
    t->tid = PyThread_get_thread_ident();
    pthread_mutex_lock(&states_lock);
    t->next = states;
    if (states) states->prev = t;
    states = t;
    pthread_mutex_unlock(&states_lock);
    pthread_setspecific(tls_key, t);
    tls = t;
    return t;
}

/* the span id of the ContextVar's open span (0: none) */
static inline int64_t cv_top(void) {
    PyObject *v = NULL;
    int64_t sid = 0;
    if (PyContextVar_Get(current_span, NULL, &v) < 0) { PyErr_Clear(); return 0; }
    if (v != NULL) {
        if (PyList_CheckExact(v) && PyList_GET_SIZE(v) > 0) {
            PyObject *s = PyList_GET_ITEM(v, 0);
            if (PyLong_CheckExact(s)) sid = PyLong_AsLongLong(s);
        }
        Py_DECREF(v);
    }
    return sid;
}

static inline void push_step(int32_t idx, int64_t step) {
    TState *t = tls;
    if (t == NULL && (t = new_state()) == NULL) return;
    if (t->depth == t->cap) {
        Frame *s = (Frame *)realloc(t->stack, sizeof(Frame) * t->cap * 2);
        if (s == NULL) return;
        t->stack = s;
        t->cap *= 2;
    }
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

/* the denoising step of the innermost open denoiser call of this thread (a nested one here, else a record in the
   ContextVar made by a denoiser's Python probe), or -1 when no denoiser call is open */
static int64_t open_step(void) {
    TState *t = tls;
    if (t != NULL)
        for (Py_ssize_t d = t->depth - 1; d >= 0; d--)
            if (t->stack[d].step >= 0) return t->stack[d].step;
    if (PySet_GET_SIZE(denoisers) == 0) return -1;
    PyObject *v = NULL;
    int64_t step = -1;
    if (PyContextVar_Get(current_span, NULL, &v) < 0) { PyErr_Clear(); return -1; }
    PyObject *rec = v;
    for (int n = 0; rec != NULL && PyList_CheckExact(rec) && PyList_GET_SIZE(rec) == 8 && n < 256; n++) {
        PyObject *attrs = PyList_GET_ITEM(rec, 4);
        if (PyDict_CheckExact(attrs) && PySet_Contains(denoisers, PyList_GET_ITEM(rec, 3)) == 1) {
            PyObject *k = PyDict_GetItemWithError(attrs, step_key);
            if (k != NULL && PyLong_CheckExact(k)) { step = PyLong_AsLongLong(k); break; }
        }
        rec = PyList_GET_ITEM(rec, 7);
    }
    if (PyErr_Occurred()) { PyErr_Clear(); step = -1; }
    Py_XDECREF(v);
    return step;
}

/* whether the innermost open call of this thread is a nested call of denoiser index idx recorded here (not one of
   its Python probe's, whose record in the ContextVar is then the newer) */
static int native_top(int32_t idx) {
    TState *t = tls;
    if (t == NULL || t->depth == 0) return 0;
    Frame *f = &t->stack[t->depth - 1];
    return f->idx == idx && f->step >= 0 && f->sid > cv_top();
}

static int grow_fin(void) {
    Py_ssize_t cap = cap_fin ? cap_fin * 2 : 65536;
    if (cap > max_fin) cap = max_fin;
    if (cap <= cap_fin) return -1;
    void *p = NULL; /* (on a cache line boundary: a record is one line) */
    if (posix_memalign(&p, 64, sizeof(Rec) * cap) != 0) return -1;
    if (recs != NULL) memcpy(p, recs, sizeof(Rec) * n_fin);
    free(recs);
    recs = (Rec *)p;
    cap_fin = cap;
    return 0;
}

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

static inline intptr_t extra_of(PyObject *code) {
    void *x = NULL;
    if (extra_index < 0 || GET_EXTRA(code, extra_index, &x) < 0) { PyErr_Clear(); return 0; }
    return (intptr_t)x;
}

#include "_native_gen.h" /* generators, coroutines, async generators (3.12+); the ContextVar helpers */

/* ---- sys.monitoring callbacks (3.12+) ---------------------------------------------------------------------- */

static PyObject *pass_on(int ev, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *cb = forward[ev];
    if (cb == NULL) Py_RETURN_NONE;
    return PyObject_Vectorcall(cb, args, nargs, NULL);
}

#define LOCAL_CALLBACK(fname, ev, body)                                                     \
    static PyObject *fname(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {         \
        if (nargs < 2) Py_RETURN_NONE;                                                      \
        intptr_t x = extra_of(args[0]);                                                     \
        if (x >= 2) { body; Py_RETURN_NONE; }                                               \
        if (x == 1) return pass_on(ev, args, nargs);                                        \
        return Py_NewRef(disable);                                                          \
    }

#define IDX ((int32_t)(x - 2))

#define DENOISER_OR(ev, native)                                                             \
    if (gen_flags[IDX] == 2) {                                                              \
        if (native) { Py_RETURN_NONE; }                                                     \
        return pass_on(ev, args, nargs);                                                    \
    }

static PyObject *mon_start(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2) {
        int64_t step;
        DENOISER_OR(EV_START, (step = open_step()) >= 0 && (push_step(IDX, step), 1))
        if (gen_flags[IDX]) gen_start(IDX); else push(IDX);
        Py_RETURN_NONE;
    }
    if (x == 1) return pass_on(EV_START, args, nargs);
    return Py_NewRef(disable);
}

static PyObject *mon_return(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2) {
        DENOISER_OR(EV_RETURN, native_top(IDX) && (pop(IDX, NULL), 1))
        if (gen_flags[IDX]) gen_end(IDX, NULL); else pop(IDX, NULL);
        Py_RETURN_NONE;
    }
    if (x == 1) return pass_on(EV_RETURN, args, nargs);
    return Py_NewRef(disable);
}

LOCAL_CALLBACK(mon_resume, EV_RESUME, if (gen_flags[IDX] == 1) gen_resume())
LOCAL_CALLBACK(mon_yield, EV_YIELD, if (gen_flags[IDX] == 1) gen_yield(IDX))

static PyObject *mon_unwind(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2) {
        DENOISER_OR(EV_UNWIND, native_top(IDX) && (pop(IDX, (PyObject *)Py_TYPE(args[2])), 1))
        if (gen_flags[IDX]) gen_end(IDX, (PyObject *)Py_TYPE(args[2])); else pop(IDX, (PyObject *)Py_TYPE(args[2]));
        Py_RETURN_NONE;
    }
    if (x == 1) return pass_on(EV_UNWIND, args, nargs);
    Py_RETURN_NONE; /* (a global event: cannot be disabled) */
}

static PyObject *mon_throw(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2 && gen_flags[IDX] == 1) gen_resume();
    else if (x == 1) return pass_on(EV_THROW, args, nargs);
    Py_RETURN_NONE;
}

/* ---- module functions ------------------------------------------------------------------------------------ */

static PyObject *py_setup(PyObject *m, PyObject *args) {
    PyObject *cv, *errname, *dis;
    Py_ssize_t maxp;
    if (!PyArg_ParseTuple(args, "OOOn", &cv, &errname, &dis, &maxp)) return NULL;
    Py_XSETREF(current_span, Py_NewRef(cv));
    Py_XSETREF(error_name, Py_NewRef(errname));
    Py_XSETREF(disable, Py_NewRef(dis));
    max_fin = maxp;
    if (step_key == NULL) {
        step_key = PyUnicode_InternFromString("diffusion.step");
        nested_key = PyUnicode_InternFromString("diffusion.nested");
        if (step_key == NULL || nested_key == NULL) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_set_forward(PyObject *m, PyObject *args) {
    PyObject *cb[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &cb[0], &cb[1], &cb[2], &cb[3], &cb[4], &cb[5])) return NULL;
    for (int i = 0; i < 6; i++) Py_XSETREF(forward[i], cb[i] == Py_None ? NULL : Py_NewRef(cb[i]));
    Py_RETURN_NONE;
}

static PyObject *py_register(PyObject *m, PyObject *args) {
    PyObject *name, *op, *probe = Py_None;
    int gen = 0;
    if (!PyArg_ParseTuple(args, "OO|Oi", &name, &op, &probe, &gen)) return NULL;
    if (gen < 0 || gen > 2) { PyErr_SetString(PyExc_ValueError, "kind: 0, 1 or 2"); return NULL; }
    if (gen == 2 && PySet_Add(denoisers, probe) < 0) return NULL;
    Py_ssize_t idx = PyList_GET_SIZE(names);
    if (idx >= cap_flags) {
        Py_ssize_t cap = cap_flags ? cap_flags * 2 : 256;
        char *f = (char *)realloc(gen_flags, cap);
        if (f == NULL) return PyErr_NoMemory();
        gen_flags = f;
        cap_flags = cap;
    }
    PyObject *t = PyTuple_Pack(2, name, op);
    if (t == NULL) return NULL;
    int r = PyList_Append(names, t);
    Py_DECREF(t);
    if (r < 0) return NULL;
    if (PyList_Append(probe_objs, probe) < 0) { PyList_SetSlice(names, idx, idx + 1, NULL); return NULL; }
    gen_flags[idx] = (char)gen;
    return PyLong_FromSsize_t(idx);
}

static PyObject *py_mark(PyObject *m, PyObject *args) {
    PyObject *code;
    Py_ssize_t val;
    if (!PyArg_ParseTuple(args, "O!n", &PyCode_Type, &code, &val)) return NULL;
    if (SET_EXTRA(code, extra_index, (void *)(intptr_t)val) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_next_id(PyObject *m, PyObject *unused) { return PyLong_FromLongLong(++last_sid); }

static PyObject *py_parent_of(PyObject *m, PyObject *prev) {
    /* the parent id of a span opened now, given the ContextVar's value prev */
    return opt_id(parent_now(prev));
}

static PyObject *py_top_name(PyObject *m, PyObject *unused) {
    /* the name of this thread's innermost open native span, or None */
    TState *t = tls;
    if (t == NULL || t->depth == 0) Py_RETURN_NONE;
    PyObject *no = PyList_GetItem(names, t->stack[t->depth - 1].idx);
    if (no == NULL) return NULL;
    return Py_NewRef(PyTuple_GET_ITEM(no, 0));
}

static PyObject *py_take(PyObject *m, PyObject *unused) {
    /* the finished calls as span tuples (SPAN_FIELDS), oldest first; the columns emptied */
    PyObject *out = PyList_New(n_fin);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n_fin; i++) {
        PyObject *no = PyList_GET_ITEM(names, recs[i].idx);
        PyObject *err;
        if (recs[i].err != NULL) {
            err = PyObject_CallOneArg(error_name, recs[i].err);
            if (err == NULL) { PyErr_Clear(); err = Py_NewRef(Py_None); }
        } else {
            err = Py_NewRef(Py_None);
        }
        PyObject *attrs = recs[i].step >= 0 ? Py_BuildValue("{ONOO}", step_key, PyLong_FromLongLong(recs[i].step),
                                                         nested_key, Py_True) : Py_NewRef(Py_None);
        PyObject *t = PyTuple_New(9); /* (built item by item: Py_BuildValue's format parsing was half the cost) */
        if (t == NULL || attrs == NULL) { Py_XDECREF(t); Py_XDECREF(attrs); Py_DECREF(err); Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(t, 0, PyLong_FromLongLong(recs[i].sid));
        PyTuple_SET_ITEM(t, 1, opt_id(recs[i].parent));
        PyTuple_SET_ITEM(t, 2, Py_NewRef(PyTuple_GET_ITEM(no, 0)));
        PyTuple_SET_ITEM(t, 3, Py_NewRef(PyTuple_GET_ITEM(no, 1)));
        PyTuple_SET_ITEM(t, 4, PyLong_FromLongLong(recs[i].start));
        PyTuple_SET_ITEM(t, 5, PyLong_FromLongLong(recs[i].end));
        PyTuple_SET_ITEM(t, 6, PyLong_FromUnsignedLong(recs[i].tid));
        PyTuple_SET_ITEM(t, 7, err);
        PyTuple_SET_ITEM(t, 8, attrs);
        for (int k = 0; k < 7; k++)
            if (PyTuple_GET_ITEM(t, k) == NULL) { Py_DECREF(t); Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, t);
    }
    for (Py_ssize_t i = 0; i < n_fin; i++) Py_XDECREF(recs[i].err);
    n_fin = 0;
    return out;
}

static PyObject *py_pending(PyObject *m, PyObject *unused) { return PyLong_FromSsize_t(n_fin); }

static PyObject *py_dropped(PyObject *m, PyObject *unused) { return PyLong_FromLongLong(dropped); }

static PyObject *py_clear(PyObject *m, PyObject *unused) {
    /* drop the finished calls and this thread's open ones (a forked child that records nothing) */
    for (Py_ssize_t i = 0; i < n_fin; i++) Py_XDECREF(recs[i].err);
    n_fin = 0;
    if (tls != NULL) tls->depth = 0;
    Py_RETURN_NONE;
}

static PyObject *py_open_spans(PyObject *m, PyObject *arg) {
    /* thread ident -> its open native calls, outermost first, as (span id, parent id, name, op, start ns) */
    unsigned long tid = PyLong_AsUnsignedLong(arg);
    if (tid == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    pthread_mutex_lock(&states_lock);
    for (TState *t = states; t != NULL; t = t->next) {
        if (t->tid != tid) continue;
        for (Py_ssize_t i = 0; i < t->depth; i++) {
            Frame *f = &t->stack[i];
            PyObject *no = PyList_GET_ITEM(names, f->idx);
            PyObject *r = Py_BuildValue("(NNOOL)", PyLong_FromLongLong(f->sid), opt_id(f->parent),
                                        PyTuple_GET_ITEM(no, 0), PyTuple_GET_ITEM(no, 1), (long long)f->start);
            if (r == NULL || PyList_Append(out, r) < 0) {
                Py_XDECREF(r);
                pthread_mutex_unlock(&states_lock);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(r);
        }
        break;
    }
    pthread_mutex_unlock(&states_lock);
    return out;
}

#include "_native_probes.h" /* the Probe types that the 3.11 instrumented code calls */
#include "_native_block.h"  /* take_block: finished calls straight into a span block */

static PyMethodDef methods[] = {
    {"setup", py_setup, METH_VARARGS, "setup(current_span, error_name, DISABLE, max_pending)"},
    {"set_forward", py_set_forward, METH_VARARGS,
     "set_forward(start, resume, return, yield, throw, unwind): the Python callbacks for Python probes' codes"},
    {"register", py_register, METH_VARARGS,
     "register(name, op, probe=None, kind=0) -> code index (kind 0 plain, 1 generator: 3.12+ sys.monitoring only, "
     "2 denoiser: the Python probe takes its outermost calls)"},
    {"mark", py_mark, METH_VARARGS, "mark(code, value): co_extra value (0 untraced, 1 Python probe, 2+index native)"},
    {"next_id", py_next_id, METH_NOARGS, "A new span id (unique in the process, never 0)."},
    {"parent_of", py_parent_of, METH_O, "parent_of(current_span value) -> the parent id of a span opened now, or None"},
    {"top_name", py_top_name, METH_NOARGS, "The name of this thread's innermost open native span, or None."},
    {"take", py_take, METH_NOARGS, "The finished calls as span tuples (tracing.buffer.SPAN_FIELDS), oldest first."},
    {"take_block", py_take_block, METH_VARARGS,
     "take_block(dumps, max_spans) -> (body, n, first span id): the oldest finished calls as a span block "
     "(store/spanblock.py; dumps: the header's JSON writer), or None (none, or a big-endian machine)"},
    {"pending", py_pending, METH_NOARGS, "How many finished calls wait."},
    {"dropped", py_dropped, METH_NOARGS, "How many finished calls were dropped (the columns full)."},
    {"clear", py_clear, METH_NOARGS, "Drop the finished calls and this thread's open ones."},
    {"open_spans", py_open_spans, METH_O, "open_spans(thread ident) -> [(span id, parent id, name, op, start ns)]"},
    {"mon_start", (PyCFunction)(void (*)(void))mon_start, METH_FASTCALL, "sys.monitoring PY_START callback"},
    {"mon_resume", (PyCFunction)(void (*)(void))mon_resume, METH_FASTCALL, "sys.monitoring PY_RESUME callback"},
    {"mon_return", (PyCFunction)(void (*)(void))mon_return, METH_FASTCALL, "sys.monitoring PY_RETURN callback"},
    {"mon_yield", (PyCFunction)(void (*)(void))mon_yield, METH_FASTCALL, "sys.monitoring PY_YIELD callback"},
    {"mon_throw", (PyCFunction)(void (*)(void))mon_throw, METH_FASTCALL, "sys.monitoring PY_THROW callback"},
    {"mon_unwind", (PyCFunction)(void (*)(void))mon_unwind, METH_FASTCALL, "sys.monitoring PY_UNWIND callback"},
    {NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "stepscope.record._native",
                                       "The tracer's hot path in C (see tracing/native.py).", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    if (pthread_key_create(&tls_key, free_state) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_key_create failed");
        return NULL;
    }
    extra_index = REQUEST_EXTRA(NULL);
    if (extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "no code extra index left");
        return NULL;
    }
    names = PyList_New(0);
    probe_objs = PyList_New(0);
    parked = PyDict_New();
    parked_gen = PyDict_New();
    orphans = PyList_New(0);
    denoisers = PySet_New(NULL);
    if (names == NULL || probe_objs == NULL || parked == NULL || parked_gen == NULL || orphans == NULL || denoisers == NULL
        || PyType_Ready(&ProbeType) < 0
        || PyType_Ready(&DenoiserProbeType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Probe", (PyObject *)&ProbeType) < 0) return NULL;
    if (PyModule_AddObjectRef(m, "DenoiserProbe", (PyObject *)&DenoiserProbeType) < 0) return NULL;
    if (PyModule_AddObjectRef(m, "parked", parked) < 0) return NULL;
    if (PyModule_AddObjectRef(m, "parked_gen", parked_gen) < 0) return NULL;
    if (PyModule_AddObjectRef(m, "orphans", orphans) < 0) return NULL;
    return m;
}
