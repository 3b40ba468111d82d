/* stepscope.record.native._native: the main thread's timer-signal sampler in C (issue 41; declared in sigtick.h).

   sampling.signals samples the main thread by two POSIX timers that signal it: a wall-clock timer on a schedule
   independent of the program, and a timer on its CPU clock. CPython's own C handler only flags a signal; the Python
   handler runs at the thread's next safe point, with the frame that was running. Here that handler is a C function
   (`tick`, installed with signal.signal like any handler, so CPython calls it at the same point with the same frame):
   no Python frame is made for it, the stack is read in place by the walker (stackwalk.c) and the sample goes into the
   walker's rows (threads.c) with no Python object made. The rules are sampling.signals' (its docstring and
   MainThreadSampler.tick): each wall expiration charges the waits of every scheduled expiration up to it; the schedule
   runs in blocks of BLOCK expirations at an interval drawn uniform in 0.5 to 1.5 periods (xorshift64*, seeded from
   Python's random module); a CPU-timer expiration charges the CPU time since the previous one. What is rare stays
   Python, called from here: a rest (MainThreadSampler.rest), the end of one (wake), the memory lane's reading
   (MemoryLane.sample, at most every MEMORY_PERIOD_MIN_NS), and pausing while the program runs its own profiler.

   State: a Tick object holds the schedule; its fields are MainThreadSampler's (read and written by its Python methods
   through properties), so the Python handler (sampling.signals._handler, the fallback: no walker) and this one keep
   the same state the same way. The module keeps one active Tick (set_tick); with none, tick() calls the fallback. */

#include "sigtick.h"

#ifdef STEPSCOPE_STACKWALK

#include "walker.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#define BLOCK 8
#define REST_NS 200000000LL /* (signals.REST_NS) */
#define MEMORY_PERIOD_MIN_NS 9000000LL

typedef struct {
    PyObject_HEAD
    char active, resting, missed, busy;
    long long due, waited, interval, left, carry, period_ns, rest_cpu;
    long long tick_t, tick_cpu, tick_cpu_q, quiet_ticks, quiet_cpu, cpu_last, cpu_last_t, samples;
    int wall_sig, cpu_sig;
    unsigned long thread_id;
    uint64_t rng;
    timer_t timers[2]; /* wall, CPU */
    char has_timer[2];
    pid_t pid;
    PyObject *owner;   /* MainThreadSampler (rest, wake, paused) */
    PyObject *walker;  /* Walker */
    PyObject *memory;  /* MemoryLane or None */
    PyObject *current; /* the open span at the last wall tick (spans.buffer.current_span's value) or None */
    PyObject *span_var;
} Tick;

static Tick *active_tick = NULL;   /* strong */
static PyObject *fallback = NULL;  /* the Python handler, called while no Tick is active */
static pid_t my_pid = 0;           /* this process's id (kept across fork by the atfork handler) */
static PyObject *s_rest, *s_wake, *s_sample, *s_last_t, *s_paused;

static void forked_child(void) { my_pid = getpid(); }


static inline uint64_t next_rand(Tick *s) { /* xorshift64* */
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline long long draw(Tick *s) { /* uniform in [0.5, 1.5) periods, ns */
    double u = (double)(next_rand(s) >> 11) * (1.0 / 9007199254740992.0);
    return (long long)((double)s->period_ns * (0.5 + u));
}

static void arm_at(Tick *s, int which, long long t, long long interval) {
    if (!s->has_timer[which]) return;
    struct itimerspec its;
    its.it_value.tv_sec = t / 1000000000LL;
    its.it_value.tv_nsec = t % 1000000000LL;
    its.it_interval.tv_sec = interval / 1000000000LL;
    its.it_interval.tv_nsec = interval % 1000000000LL;
    timer_settime(s->timers[which], TIMER_ABSTIME, &its, NULL);
}

static void disarm(Tick *s, int which) {
    if (!s->has_timer[which]) return;
    struct itimerspec zero = {{0, 0}, {0, 0}};
    timer_settime(s->timers[which], 0, &zero, NULL);
}

/* one sample of the main thread's stack (frame and its callers) into the walker's rows: 1 recorded, 0 not (out of
   memory: the caller carries the time to the next) */
static int record(Tick *s, PyObject *frame, int64_t t, int64_t wall, int64_t cpu) {
    Walker *w = (Walker *)s->walker;
    int32_t si = walk_one(w, ((PyFrameObject *)frame)->f_frame);
    if (si == NOT_SHOWN) si = intern_stack(w, 0);
    if (si < 0 || walker_row(w, t, s->thread_id, si, wall, cpu) < 0) {
        PyErr_Clear();
        return 0;
    }
    w->last_walk = si;
    s->samples++;
    return 1;
}

/* a Python method of the owner, called with args (a rare path); -1 with an exception set */
static int call_owner(Tick *s, PyObject *name, PyObject *a, PyObject *b) {
    PyObject *args[3] = {s->owner, a, b};
    PyObject *r = PyObject_VectorcallMethod(name, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* MainThreadSampler.tick: a wall-timer expiration; -1 with an exception set (from a rest's Python call) */
static int wall_tick(Tick *s, PyObject *frame) {
    int64_t t = clock_ns(CLOCK_MONOTONIC);
    long long due = s->due;
    if (due > t) return 0; /* a spurious tick: a re-arm raced an expiration */
    long long wall = s->carry, interval = s->interval, n = s->left;
    while (due <= t) {
        wall += s->waited;
        s->waited = interval;
        due += interval;
        n--;
    }
    s->due = due;
    if (n <= 0) {
        s->interval = draw(s);
        n = BLOCK;
        arm_at(s, 0, due, s->interval);
    }
    s->left = n;
    s->carry = record(s, frame, t, wall, 0) ? 0 : wall;
    int64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    int rest = 0;
    if (s->tick_cpu_q >= 0 && s->quiet_cpu + cpu - s->tick_cpu_q < (s->quiet_ticks + 1) * s->rest_cpu) {
        s->quiet_ticks++;
        s->quiet_cpu += cpu - s->tick_cpu_q;
        long long need = REST_NS / (s->period_ns > 0 ? s->period_ns : 1);
        rest = s->quiet_ticks >= (need > 10 ? need : 10) && s->carry == 0;
    } else {
        s->quiet_ticks = s->quiet_cpu = 0;
    }
    s->tick_cpu_q = s->tick_cpu = cpu;
    s->tick_t = t;
    if (rest) {
        PyObject *a = PyLong_FromLongLong(t), *b = PyLong_FromLongLong(cpu);
        int r = a == NULL || b == NULL ? -1 : call_owner(s, s_rest, a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
        return r;
    }
    return 0;
}

static int body(Tick *s, int signum, PyObject *frame) {
    int other = foreign_tool();
    if (other < 0) return -1;
    if (other) { /* the program runs its own profiler: disarm; the recorder finishes the pause (check) */
        s->active = 0;
        disarm(s, 0);
        disarm(s, 1);
        return PyObject_SetAttr(s->owner, s_paused, Py_True);
    }
    if (signum == s->wall_sig) {
        if (s->resting) return 0; /* an expiration that was pending when the timer was disarmed */
        PyObject *cur = NULL;
        if (s->span_var != NULL && PyContextVar_Get(s->span_var, Py_None, &cur) < 0) return -1;
        Py_XSETREF(s->current, cur); /* (a new reference: the default's, or the value's) */
        if (wall_tick(s, frame) < 0) return -1;
        if (s->memory != NULL && s->memory != Py_None) { /* the memory lane: at most every MEMORY_PERIOD_MIN_NS */
            int64_t tm = clock_ns(CLOCK_MONOTONIC);
            PyObject *last = PyObject_GetAttr(s->memory, s_last_t);
            if (last == NULL) return -1;
            long long lt = PyLong_AsLongLong(last);
            Py_DECREF(last);
            if (lt == -1 && PyErr_Occurred()) return -1;
            if (tm - lt >= MEMORY_PERIOD_MIN_NS) {
                PyObject *a = PyLong_FromLongLong(tm);
                if (a == NULL) return -1;
                PyObject *r = PyObject_CallMethodOneArg(s->memory, s_sample, a);
                Py_DECREF(a);
                if (r == NULL) return -1;
                Py_DECREF(r);
            }
        }
    } else {
        int64_t t = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        long long used = cpu - s->cpu_last;
        /* resting, its CPU period used at under the idle share of a CPU (an event loop's timer, a heartbeat): it stays
           resting, its CPU charged by the recorder's looks, which walk it whenever it moved (signals.py too) */
        int idle = s->resting && s->cpu_last_t > 0 && used * IDLE_SHARE <= t - s->cpu_last_t;
        s->cpu_last = cpu;
        s->cpu_last_t = t;
        if (used > 0 && !idle) record(s, frame, t, 0, used);
        if (s->resting && !idle) { /* it runs again: the wall timer back (wake), the wait since the recorder's look charged */
            PyObject *a = PyLong_FromLongLong(t);
            int r = a == NULL ? -1 : call_owner(s, s_wake, frame, a);
            Py_XDECREF(a);
            if (r < 0) return -1;
        }
    }
    while (s->missed && s->active) { /* a wall tick came while this ran: it is this stack's too */
        s->missed = 0;
        if (wall_tick(s, frame) < 0) return -1;
    }
    return 0;
}

/* tick(signum, frame): the installed signal handler */
static PyObject *tick(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    Tick *s = active_tick;
    if (s == NULL) {
        if (fallback != NULL) return PyObject_Vectorcall(fallback, args, nargs, NULL);
        Py_RETURN_NONE;
    }
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "tick(signum, frame)");
        return NULL;
    }
    int signum = (int)PyLong_AsLong(args[0]);
    if (signum == -1 && PyErr_Occurred()) return NULL;
    PyObject *frame = args[1];
    if (!s->active || s->pid != my_pid) Py_RETURN_NONE;
    if (s->busy || !PyFrame_Check(frame)) { /* the wall timer is one-shot per block end: a missed tick re-arms */
        if (signum == s->wall_sig) s->missed = 1;
        Py_RETURN_NONE;
    }
    s->busy = 1; /* a signal that comes while this runs (in a Python call of a rare path) is not handled inside it */
    Py_INCREF(s);
    int r = body(s, signum, frame);
    s->busy = 0;
    Py_DECREF(s);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

/* set_tick(tick or None, fallback=None): the active Tick (its pid taken now), and the Python handler for while none */
static PyObject *set_tick(PyObject *mod, PyObject *args) {
    PyObject *t, *fb = NULL;
    if (!PyArg_ParseTuple(args, "O|O:set_tick", &t, &fb)) return NULL;
    if (t != Py_None && !PyObject_TypeCheck(t, &TickType)) {
        PyErr_SetString(PyExc_TypeError, "set_tick: a Tick or None");
        return NULL;
    }
    if (t != Py_None) ((Tick *)t)->pid = my_pid;
    Tick *old = active_tick;
    active_tick = t == Py_None ? NULL : (Tick *)Py_NewRef(t);
    if (fb != NULL && fb != Py_None) Py_XSETREF(fallback, Py_NewRef(fb));
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

/* Tick.bind(owner, walker, thread_id, wall_sig, cpu_sig, span_var, seed): what the handler reads and calls */
static PyObject *tick_bind(Tick *s, PyObject *args) {
    PyObject *owner, *walker, *span_var;
    unsigned long tid;
    int ws, cs;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OO!kiiOK:bind", &owner, &WalkerType, &walker, &tid, &ws, &cs, &span_var, &seed))
        return NULL;
    Py_XSETREF(s->owner, Py_NewRef(owner));
    Py_XSETREF(s->walker, Py_NewRef(walker));
    Py_XSETREF(s->span_var, span_var == Py_None ? NULL : Py_NewRef(span_var));
    s->thread_id = tid;
    s->wall_sig = ws;
    s->cpu_sig = cs;
    s->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    Py_RETURN_NONE;
}

/* Tick.unbind(): the references released (a session's end: the owner holds this Tick) */
static PyObject *tick_unbind(Tick *s, PyObject *unused) {
    s->active = 0;
    s->has_timer[0] = s->has_timer[1] = 0;
    Py_CLEAR(s->owner);
    Py_CLEAR(s->walker);
    Py_CLEAR(s->span_var);
    Py_XSETREF(s->current, Py_NewRef(Py_None));
    Py_XSETREF(s->memory, Py_NewRef(Py_None));
    Py_RETURN_NONE;
}

/* Tick.set_timer(which, id or None): the timer_t of the wall (0) or CPU (1) timer (ThreadTimer's), or none */
static PyObject *tick_set_timer(Tick *s, PyObject *args) {
    int which;
    PyObject *id;
    if (!PyArg_ParseTuple(args, "iO:set_timer", &which, &id)) return NULL;
    if (which != 0 && which != 1) {
        PyErr_SetString(PyExc_ValueError, "set_timer: which is 0 (wall) or 1 (CPU)");
        return NULL;
    }
    if (id == Py_None) {
        s->has_timer[which] = 0;
        Py_RETURN_NONE;
    }
    void *p = PyLong_AsVoidPtr(id);
    if (p == NULL && PyErr_Occurred()) return NULL;
    s->timers[which] = (timer_t)p;
    s->has_timer[which] = 1;
    Py_RETURN_NONE;
}

static int tick_traverse(Tick *s, visitproc visit, void *arg) {
    Py_VISIT(s->owner);
    Py_VISIT(s->walker);
    Py_VISIT(s->memory);
    Py_VISIT(s->current);
    Py_VISIT(s->span_var);
    return 0;
}

static int tick_clear(Tick *s) {
    Py_CLEAR(s->owner);
    Py_CLEAR(s->walker);
    Py_CLEAR(s->memory);
    Py_CLEAR(s->current);
    Py_CLEAR(s->span_var);
    return 0;
}

static void tick_dealloc(Tick *s) {
    PyObject_GC_UnTrack(s);
    tick_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *tick_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Tick *s = (Tick *)type->tp_alloc(type, 0);
    if (s == NULL) return NULL;
    s->tick_cpu = s->tick_cpu_q = -1;
    s->interval = s->period_ns = 1;
    s->rest_cpu = 600000;
    s->rng = 0x9E3779B97F4A7C15ULL;
    s->current = Py_NewRef(Py_None);
    s->memory = Py_NewRef(Py_None);
    return (PyObject *)s;
}

static PyMethodDef tick_methods[] = {
    {"bind", (PyCFunction)tick_bind, METH_VARARGS,
     "bind(owner, walker, thread_id, wall_signal, cpu_signal, span_var, seed): the sampler it serves"},
    {"unbind", (PyCFunction)tick_unbind, METH_NOARGS, "Release the references bind took (inactive from now on)."},
    {"set_timer", (PyCFunction)tick_set_timer, METH_VARARGS,
     "set_timer(which, timer_id or None): the wall (0) or CPU (1) timer's timer_t, as ThreadTimer holds it"},
    {NULL, NULL, 0, NULL},
};

#define LL(name, doc) {#name, Py_T_LONGLONG, offsetof(Tick, name), 0, doc}
#define B(name, doc) {#name, Py_T_BOOL, offsetof(Tick, name), 0, doc}
static PyMemberDef tick_members[] = {
    B(active, "sampling now"),
    B(resting, "the wall timer disarmed while the main thread waits (MainThreadSampler.rest)"),
    B(missed, "a wall tick came while the handler ran"),
    LL(due, "when the wall timer's pending expiration is due (CLOCK_MONOTONIC ns)"),
    LL(waited, "the length of the wait that ends then (ns)"),
    LL(interval, "the kernel timer's interval in the current block (ns)"),
    LL(left, "expirations left in the current block"),
    LL(carry, "wall time of a sample that could not be recorded, added to the next (ns)"),
    LL(period_ns, "the mean wall period (ns)"),
    LL(rest_cpu, "the CPU (ns) a tick of a waiting main thread may use"),
    LL(tick_t, "the last wall tick's time (ns), or the timer's start"),
    LL(tick_cpu, "the main thread's CPU clock then (ns; -1 unknown)"),
    LL(tick_cpu_q, "its CPU clock at the last tick of the quiet stretch (ns; -1: none)"),
    LL(quiet_ticks, "ticks in the current quiet stretch"),
    LL(quiet_cpu, "CPU used over them (ns)"),
    LL(cpu_last, "the main thread's CPU time at the last CPU-timer sample (ns)"),
    LL(cpu_last_t, "... and when (ns; 0: none yet)"),
    {"samples", Py_T_LONGLONG, offsetof(Tick, samples), Py_READONLY, "samples recorded here"},
    {"current", Py_T_OBJECT_EX, offsetof(Tick, current), 0, "the main thread's open span record at the last wall tick"},
    {"memory", Py_T_OBJECT_EX, offsetof(Tick, memory), 0, "the memory lane read at wall ticks (MemoryLane), or None"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject TickType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stepscope.record.native._native.Tick",
    .tp_basicsize = sizeof(Tick),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The main thread's timer-signal sampler's state, driven by tick() (sampling.signals).",
    .tp_new = tick_new,
    .tp_dealloc = (destructor)tick_dealloc,
    .tp_traverse = (traverseproc)tick_traverse,
    .tp_clear = (inquiry)tick_clear,
    .tp_methods = tick_methods,
    .tp_members = tick_members,
};

PyMethodDef sigtick_methods[] = {
    {"tick", (PyCFunction)(void (*)(void))tick, METH_FASTCALL,
     "tick(signum, frame): the timer signals' handler (the active Tick's, else the fallback's)"},
    {"set_tick", set_tick, METH_VARARGS, "set_tick(tick or None, fallback=None): the Tick tick() serves"},
    {NULL, NULL, 0, NULL},
};

int sigtick_init(PyObject *m) {
    my_pid = getpid();
    static int atfork_done = 0;
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, forked_child);
        atfork_done = 1;
    }
    s_rest = PyUnicode_InternFromString("rest");
    s_wake = PyUnicode_InternFromString("wake");
    s_sample = PyUnicode_InternFromString("sample");
    s_last_t = PyUnicode_InternFromString("last_t");
    s_paused = PyUnicode_InternFromString("paused");
    if (!s_rest || !s_wake || !s_sample || !s_last_t || !s_paused) return -1;
    if (PyType_Ready(&TickType) < 0 || PyModule_AddObjectRef(m, "Tick", (PyObject *)&TickType) < 0) return -1;
    return PyModule_AddFunctions(m, sigtick_methods);
}

#else

int sigtick_init(PyObject *m) {
    (void)m;
    return 0;
}

#endif /* STEPSCOPE_STACKWALK */
