/* stepscope.record.native._native: the Walker's own declarations, shared by stackwalk.c (the walk, the tables) and
   threads.c (each thread's accounting between looks); included by those two only (Py_BUILD_CORE: CPython's internal
   frame struct). See stackwalk.c for the tables and stackwalk.h for what the module exposes. */

#ifndef STEPSCOPE_NATIVE_WALKER_H
#define STEPSCOPE_NATIVE_WALKER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "stackwalk.h"

#ifdef STEPSCOPE_STACKWALK

#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

/* clock c now, in ns (CLOCK_MONOTONIC: time.perf_counter_ns on Linux; CLOCK_THREAD_CPUTIME_ID: this thread's CPU) */
static inline int64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#ifndef Py_T_PYSSIZET /* (3.11: the names of structmember.h) */
#include <structmember.h>
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_T_LONGLONG T_LONGLONG
#define Py_T_INT T_INT
#define Py_T_BOOL T_BOOL
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

#if PY_VERSION_HEX >= 0x030D0000
#define FRAME_CODE(f) ((f)->f_executable)
#define TOP_FRAME(ts) ((ts)->current_frame)
#else
#define FRAME_CODE(f) ((PyObject *)(f)->f_code)
#define TOP_FRAME(ts) ((ts)->cframe->current_frame)
#endif

#if PY_VERSION_HEX >= 0x030D0000
#define INSTR(f) ((f)->instr_ptr)
#else
#define INSTR(f) ((f)->prev_instr)
#endif
#if PY_VERSION_HEX >= 0x030C0000
#define CSTACK(f) ((f)->owner == FRAME_OWNED_BY_CSTACK)
#else
#define CSTACK(f) 0
#endif

#define MISSING INT32_MIN /* a map's answer for a key it lacks */
#define NO_MEMORY (-2)    /* frame_index / walk_one: out of memory (MemoryError set) */
#define NOT_SHOWN (-3)    /* frame_index: an incomplete frame (or not a code's), which a frame object would not show */

/* ---- a map from a key of two words to an int32 (codes, offs, lines) ----------------------------------------- */

typedef struct { /* 16 bytes: four to a cache line */
    uintptr_t a; /* 0: an empty slot (a code address, or a code index + 1, is never 0) */
    uint32_t b;
    int32_t v;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask, n; /* size - 1 (0: none allocated yet), slots used */
} Map;

static inline uint64_t mix2(uint64_t a, uint64_t b) { /* both words mixed, then splitmix64's finaliser */
    uint64_t h = (a ^ (a >> 29)) * 0x9E3779B97F4A7C15ull + b * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 31;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

static inline int32_t map_get(const Map *m, uintptr_t a, uint32_t b) {
    if (m->mask == 0) return MISSING;
    for (size_t i = mix2(a, (uint64_t)b) & m->mask;; i = (i + 1) & m->mask) {
        const Slot *s = &m->slots[i];
        if (s->a == a && s->b == b) return s->v;
        if (s->a == 0) return MISSING;
    }
}

static inline int map_put(Map *m, uintptr_t a, uint32_t b, int32_t v) { /* a new key; 0, or -1 with MemoryError set */
    if (2 * (m->n + 1) > m->mask + 1) { /* grow to keep it at most half full */
        size_t size = m->mask ? 2 * (m->mask + 1) : 256;
        Slot *slots = PyMem_Calloc(size, sizeof(Slot));
        if (slots == NULL) { PyErr_NoMemory(); return -1; }
        for (size_t k = 0; m->mask && k <= m->mask; k++) {
            Slot *s = &m->slots[k];
            if (s->a == 0) continue;
            size_t i = mix2(s->a, (uint64_t)s->b) & (size - 1);
            while (slots[i].a != 0) i = (i + 1) & (size - 1);
            slots[i] = *s;
        }
        PyMem_Free(m->slots);
        m->slots = slots;
        m->mask = size - 1;
    }
    size_t i = mix2(a, (uint64_t)b) & m->mask;
    while (m->slots[i].a != 0) i = (i + 1) & m->mask;
    m->slots[i] = (Slot){a, b, v};
    m->n++;
    return 0;
}

static inline void map_clear(Map *m) {
    PyMem_Free(m->slots);
    *m = (Map){NULL, 0, 0};
}

/* grow *p (an array of n items of `size` bytes, room for *cap) to room for one more; 0, or -1 with MemoryError */
static inline int reserve(void **p, Py_ssize_t n, Py_ssize_t *cap, size_t size, Py_ssize_t need) {
    if (n + need <= *cap) return 0;
    Py_ssize_t c = *cap ? *cap : 64;
    while (c < n + need) c *= 2;
    void *q = PyMem_Realloc(*p, (size_t)c * size);
    if (q == NULL) { PyErr_NoMemory(); return -1; }
    *p = q;
    *cap = c;
    return 0;
}

/* ---- the walker ------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject *code;   /* strong */
    PyObject *module; /* its globals' __name__ (a str, strong), or NULL: "" */
    int hidden;
} Code;

typedef struct {
    int32_t code, line; /* code index; line -1: none (f_lineno None) */
} WFrame;

typedef struct {
    Py_ssize_t start; /* in ids */
    int32_t len;
    uint64_t hash;
} Stack;

/* one thread of the process as the accounting knows it (threads.c): its previous sample */
typedef struct {
    unsigned long tid;    /* threading.get_ident() */
    unsigned long native; /* its OS thread id (0: unknown, no CPU clock) */
    int64_t t, cpu;       /* the previous sample's time and the thread's CPU clock then (ns; cpu -1: unknown) */
    int32_t stack;        /* the previous sample's stack (walker stack index) */
    int64_t slack;        /* CPU ns it may still use before it counts as run (-1: none); walked when it moves */
    uint64_t look;        /* the look that last saw it */
    int64_t still_t;      /* the last time a check without rows found it unmoved since t (Walker.unmoved, a quiet
                             look): an ended thread is charged at its stack until then */
    int64_t slack_cap;    /* its slack at the hand-over: the most it refills to, by IDLE_SHARE of the time passed */
    int64_t seen;         /* its CPU clock at the last look that read it (cpu, unless a lazy look found it at the same
                             stack and left its row for later: ran, moved and the idle share count from here) */
    uintptr_t ts;         /* its thread state's address at the last look with the GIL (a remote look's: remote.c) */
} TRec;

/* The share of a CPU (1/IDLE_SHARE) below which threads' runs between waits count as idle: a resting main thread's
   slack and the recorder's quiet (Walker.idle) refill at it, up to IDLE_CAP_NS (an event loop's timer, a heartbeat:
   a few us to a ms a wake-up, never the 5-100% of a step's CPU) */
#define IDLE_SHARE 100
#define IDLE_CAP_NS 1000000LL

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_depth;
    PyObject *hidden;  /* a set or frozenset of file names (sampler.HIDDEN_FILES) */
    PyObject *name;    /* "__name__", interned */
    PyObject *empty;   /* "": the module of a code whose globals have no str __name__ */
    Code *codes;
    Py_ssize_t n_codes, cap_codes;
    WFrame *frames;
    Py_ssize_t n_frames, cap_frames, taken_frames;
    Stack *stacks;
    Py_ssize_t n_stacks, cap_stacks, taken_stacks;
    int32_t *ids; /* every stack's frame indices, end to end */
    Py_ssize_t n_ids, cap_ids;
    Map code_map, offs, lines;
    int32_t *stack_slots; /* stack index, -1 empty; size stack_mask + 1 */
    size_t stack_mask;
    int32_t *buf; /* one walk's frame indices, leaf first: max_depth of them */
    long long truncated;
    Py_ssize_t unseen; /* frames and stacks made since the last take */
    /* each thread's accounting (threads.c) */
    TRec *threads;
    Py_ssize_t n_threads, cap_threads;
    uint64_t looks;
    int64_t *rows; /* the samples recorded since the last rows(): 5 int64 a row (t, thread, stack, wall, cpu) */
    Py_ssize_t n_rows, cap_rows;
    int32_t last_walk; /* the stack index of the last walk(frame) or signal-handler sample (the main thread's), -1 */
    Py_ssize_t moved;  /* threads of the last sample() walked within their slack (moved, not in its ran list) */
    long long used;    /* the CPU time (ns) the threads walked by the last sample() used since their previous rows
                          (-1: unknown, a thread seen for the first time) */
    long long idle_tokens, idle_t; /* Walker.idle's allowance (ns of CPU) and when it was last refilled */
    long long deferred; /* threads the last (lazy) sample() found at the stack of their last row and left for later */
    int busy;           /* traced calls ended since the last look: a resting thread's slack does not refill */
    long long quiet_looks; /* the last run()'s looks made without the GIL (looks.c: no thread's CPU clock moved) */
    /* Walker.run (looks.c): its wait's eventfd + 1 (0: none yet), and the threads' CPU clocks it read before taking
       the GIL for a look (n_pre of them, by OS thread id), which sample() uses in place of reading them again */
    int wake_fd1;
    const unsigned long *pre_native;
    const int64_t *pre_cpu;
    Py_ssize_t n_pre;
    struct Remote *remote;  /* the samples read without the GIL, waiting (remote.c), and its copy of the known codes */
    long long remote_looks; /* looks made without the GIL that read a thread's stack (remote.c), all runs */
    long long remote_misses; /* threads such a look could not read (the look then taken with the GIL) */
    char remote_on;          /* looks without the GIL allowed (1, the default; 0: every look takes the GIL) */
    /* busy threads sampled by a timer of their own (ownclock.c) */
    char own_on;                 /* allowed (1, the default, where a signal is installed: _native.own_signal) */
    unsigned long own_skip[64];  /* the OS ids of the threads the current look leaves to their own timers */
    Py_ssize_t n_own_skip;
    long long own_threads, own_samples, own_misses; /* threads armed, samples accounted, stacks not read (all runs) */
    long long own_ns; /* the time (ns) their signal handlers took, as drained (all runs) */
    long long own_period; /* their timers' period (ns; the overhead budget's), 0: the looks' period */
} Walker;


/* Whether a frame object would show this frame (see the top of the file). */
static inline int shown(_PyInterpreterFrame *f) {
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK) return 0;
#endif
    return PyCode_Check(FRAME_CODE(f)) && !_PyFrame_IsIncomplete(f);
}

/* f's offset key in the walker's offs map: (f_lasti + 1) * 2, plus 1 for a generator's frame (complete at any offset) */
static inline uint32_t offset_key(_PyInterpreterFrame *f) {
    int lasti = (int)(INSTR(f) - _PyCode_CODE((PyCodeObject *)FRAME_CODE(f))); /* (no read of the code object) */
    return ((uint32_t)(lasti + 1) << 1) | (f->owner == FRAME_OWNED_BY_GENERATOR);
}

int32_t walk_one(Walker *w, _PyInterpreterFrame *f);
int32_t intern_stack(Walker *w, int32_t n);

/* the CPU time (ns) used so far by the thread with OS id native of this process, -1 when unknown (threads.c; no
   GIL needed) */
int64_t thread_cpu(unsigned long native);

/* one sample row (threads.c); 0, or -1 with MemoryError set */
int walker_row(Walker *w, int64_t t, unsigned long tid, int32_t stack, int64_t wall, int64_t cpu);

Py_ssize_t read_ids(PyObject *skip, unsigned long *buf, Py_ssize_t cap, unsigned long **out);

#endif /* STEPSCOPE_STACKWALK */
#endif
