/* stepscope._native: the tracer's hot path in C (issue 31).

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
   The GIL serialises everything here; a free-threaded build is refused at build time. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#ifdef Py_GIL_DISABLED
#error "stepscope._native needs the GIL (the pure-Python recorder serves free-threaded builds)"
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
    int64_t sid, parent, start;
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

/* finished calls, column by column */
static int64_t *c_sid, *c_parent, *c_start, *c_end;
static int32_t *c_idx;
static unsigned long *c_tid;
static PyObject **c_err;
static Py_ssize_t n_fin = 0, cap_fin = 0;
static Py_ssize_t max_fin = 1000000; /* tracing.buffer.MAX_PENDING: past it new spans are dropped */
static int64_t dropped = 0;

static int64_t last_sid = 0;
static PyObject *names = NULL;        /* list: index -> (name, op) */
static PyObject *probe_objs = NULL;   /* list: index -> the Python Probe (a generator record's probe slot) */
static char *gen_flags = NULL;        /* index -> 1 for a generator, coroutine or async generator */
static Py_ssize_t cap_flags = 0;
static PyObject *parked = NULL;       /* dict: frame address -> the record of a suspended generator frame */
static PyObject *current_span = NULL; /* the ContextVar */
static PyObject *error_name = NULL;   /* exception type -> "module.Qualname" */
static PyObject *disable = NULL;      /* sys.monitoring.DISABLE */
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

static inline void push(int32_t idx) {
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
    f->start = now_ns();
}

static int grow_fin(void) {
    Py_ssize_t cap = cap_fin ? cap_fin * 2 : 65536;
    if (cap > max_fin) cap = max_fin;
    if (cap <= cap_fin) return -1;
#define GROW(col, T) { T *p = (T *)realloc(col, sizeof(T) * cap); if (p == NULL) return -1; col = p; }
    GROW(c_sid, int64_t) GROW(c_parent, int64_t) GROW(c_start, int64_t) GROW(c_end, int64_t)
    GROW(c_idx, int32_t) GROW(c_tid, unsigned long) GROW(c_err, PyObject *)
#undef GROW
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
    c_sid[i] = f->sid;
    c_parent[i] = f->parent;
    c_idx[i] = f->idx;
    c_start[i] = f->start;
    c_end[i] = end;
    c_tid[i] = t->tid;
    c_err[i] = e;
}

static inline intptr_t extra_of(PyObject *code) {
    void *x = NULL;
    if (extra_index < 0 || GET_EXTRA(code, extra_index, &x) < 0) { PyErr_Clear(); return 0; }
    return (intptr_t)x;
}

/* ---- generators, coroutines, async generators (3.12+): tracing.probes.Probe's steps in C ---------------- */

static PyObject *opt_id(int64_t v) { return v ? PyLong_FromLongLong(v) : Py_NewRef(Py_None); }

/* the parent id of a span opened now, given the ContextVar's value prev (0: none; a record whose id is None is the
   marker of a call a subclass filter left untraced) */
static int64_t parent_now(PyObject *prev) {
    int64_t p = 0;
    if (prev != NULL && PyList_CheckExact(prev) && PyList_GET_SIZE(prev) > 0) {
        PyObject *s = PyList_GET_ITEM(prev, 0);
        if (PyLong_CheckExact(s)) p = PyLong_AsLongLong(s);
    }
    TState *t = tls;
    if (t != NULL && t->depth > 0 && t->stack[t->depth - 1].sid > p) p = t->stack[t->depth - 1].sid;
    return p;
}

static inline PyObject *cv_get(void) { /* a new reference; None when unset */
    PyObject *v = NULL;
    if (PyContextVar_Get(current_span, Py_None, &v) < 0) { PyErr_Clear(); return Py_NewRef(Py_None); }
    return v;
}

static inline void cv_set(PyObject *v) {
    PyObject *tok = PyContextVar_Set(current_span, v);
    if (tok == NULL) PyErr_Clear(); else Py_DECREF(tok);
}

/* this code index's record if it is the current one (a new reference), else NULL */
static PyObject *current_of(int32_t idx) {
    PyObject *rec = cv_get();
    if (PyList_CheckExact(rec) && PyList_GET_SIZE(rec) == 8
        && PyList_GET_ITEM(rec, 3) == PyList_GET_ITEM(probe_objs, idx))
        return rec;
    Py_DECREF(rec);
    return NULL;
}

static PyObject *frame_key(void) { /* the running frame's address (id(frame)), or NULL */
    PyFrameObject *f = PyEval_GetFrame();
    if (f == NULL) return NULL;
    return PyLong_FromVoidPtr(f);
}

/* the parked record of the running frame (removed from the table when take), a new reference, or NULL */
static PyObject *parked_rec(int take) {
    if (PyDict_GET_SIZE(parked) == 0) return NULL;
    PyObject *key = frame_key();
    if (key == NULL) { PyErr_Clear(); return NULL; }
    PyObject *rec = PyDict_GetItemWithError(parked, key);
    if (rec != NULL) {
        Py_INCREF(rec);
        if (take && PyDict_DelItem(parked, key) < 0) PyErr_Clear();
    } else {
        PyErr_Clear();
    }
    Py_DECREF(key);
    return rec;
}

static void gen_start(int32_t idx) {
    Py_XDECREF(parked_rec(1)); /* a frame left suspended with no event (3.13's close) at this address: forgotten */
    PyObject *prev = cv_get();
    int64_t parent = parent_now(prev), sid = ++last_sid;
    PyObject *rec = Py_BuildValue("[NNNOOOON]", PyLong_FromLongLong(sid), PyLong_FromLongLong(now_ns()),
                                  opt_id(parent), PyList_GET_ITEM(probe_objs, idx), Py_None,
                                  PyTuple_GET_ITEM(PyList_GET_ITEM(names, idx), 0), Py_None, prev);
    if (rec == NULL) { PyErr_Clear(); return; }
    cv_set(rec);
    Py_DECREF(rec);
}

static void gen_yield(int32_t idx) { /* Probe.suspend */
    PyObject *rec = current_of(idx);
    if (rec == NULL) return;
    PyObject *key = frame_key();
    if (key == NULL || PyDict_SetItem(parked, key, rec) < 0) PyErr_Clear();
    Py_XDECREF(key);
    cv_set(PyList_GET_ITEM(rec, 7));
    Py_DECREF(rec);
}

static void gen_resume(void) { /* Probe.resume */
    PyObject *rec = parked_rec(1);
    if (rec == NULL) return;
    PyList_SetItem(rec, 7, cv_get());
    cv_set(rec);
    Py_DECREF(rec);
}

static PyObject *gen_record(int32_t idx, int take) { /* Probe._record */
    PyObject *rec = parked_rec(take);
    return rec != NULL ? rec : current_of(idx);
}

static void gen_end(int32_t idx, PyObject *exc_type) { /* Probe.error (exc_type not NULL), then Probe.exit */
    int64_t end = now_ns();
    PyObject *rec = gen_record(idx, 1);
    if (rec == NULL) return;
    PyObject *sid = PyList_GET_ITEM(rec, 0);
    if (PyLong_CheckExact(sid)) {
        PyObject *e = PyList_GET_ITEM(rec, 6);
        if (exc_type != NULL && !PyType_IsSubtype((PyTypeObject *)exc_type, (PyTypeObject *)PyExc_GeneratorExit))
            e = exc_type; /* (a closed generator ended normally) */
        if (n_fin < cap_fin || grow_fin() == 0) {
            Py_ssize_t i = n_fin++;
            PyObject *parent = PyList_GET_ITEM(rec, 2);
            c_sid[i] = PyLong_AsLongLong(sid);
            c_parent[i] = PyLong_CheckExact(parent) ? PyLong_AsLongLong(parent) : 0;
            c_idx[i] = idx;
            c_start[i] = PyLong_AsLongLong(PyList_GET_ITEM(rec, 1));
            c_end[i] = end;
            c_tid[i] = tls != NULL ? tls->tid : PyThread_get_thread_ident();
            c_err[i] = PyType_Check(e) ? Py_NewRef(e) : NULL;
            if (PyErr_Occurred()) PyErr_Clear();
        } else {
            dropped++;
        }
    }
    cv_set(PyList_GET_ITEM(rec, 7));
    Py_DECREF(rec);
}

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

LOCAL_CALLBACK(mon_start, EV_START, if (gen_flags[IDX]) gen_start(IDX); else push(IDX))
LOCAL_CALLBACK(mon_return, EV_RETURN, if (gen_flags[IDX]) gen_end(IDX, NULL); else pop(IDX, NULL))
LOCAL_CALLBACK(mon_resume, EV_RESUME, if (gen_flags[IDX]) gen_resume())
LOCAL_CALLBACK(mon_yield, EV_YIELD, if (gen_flags[IDX]) gen_yield(IDX))

static PyObject *mon_unwind(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2) {
        if (gen_flags[IDX]) gen_end(IDX, (PyObject *)Py_TYPE(args[2])); else pop(IDX, (PyObject *)Py_TYPE(args[2]));
        Py_RETURN_NONE;
    }
    if (x == 1) return pass_on(EV_UNWIND, args, nargs);
    Py_RETURN_NONE; /* (a global event: cannot be disabled) */
}

static PyObject *mon_throw(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2 && gen_flags[IDX]) gen_resume();
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
    if (!PyArg_ParseTuple(args, "OO|Op", &name, &op, &probe, &gen)) return NULL;
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
        PyObject *no = PyList_GET_ITEM(names, c_idx[i]);
        PyObject *err;
        if (c_err[i] != NULL) {
            err = PyObject_CallOneArg(error_name, c_err[i]);
            if (err == NULL) { PyErr_Clear(); err = Py_NewRef(Py_None); }
        } else {
            err = Py_NewRef(Py_None);
        }
        PyObject *t = Py_BuildValue("(NNOOLLkNO)", PyLong_FromLongLong(c_sid[i]), opt_id(c_parent[i]),
                                    PyTuple_GET_ITEM(no, 0), PyTuple_GET_ITEM(no, 1), (long long)c_start[i],
                                    (long long)c_end[i], c_tid[i], err, Py_None);
        if (t == NULL) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, t);
    }
    for (Py_ssize_t i = 0; i < n_fin; i++) Py_XDECREF(c_err[i]);
    n_fin = 0;
    return out;
}

static PyObject *py_pending(PyObject *m, PyObject *unused) { return PyLong_FromSsize_t(n_fin); }

static PyObject *py_dropped(PyObject *m, PyObject *unused) { return PyLong_FromLongLong(dropped); }

static PyObject *py_clear(PyObject *m, PyObject *unused) {
    /* drop the finished calls and this thread's open ones (a forked child that records nothing) */
    for (Py_ssize_t i = 0; i < n_fin; i++) Py_XDECREF(c_err[i]);
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

/* ---- Probe: what the 3.11 instrumented code calls ------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    int32_t idx;
} ProbeObject;

static PyObject *probe_enter(ProbeObject *self, PyObject *unused) { push(self->idx); Py_RETURN_NONE; }

static PyObject *probe_error(ProbeObject *self, PyObject *unused) {
    TState *t = tls;
    if (t == NULL || t->depth == 0 || t->stack[t->depth - 1].idx != self->idx) Py_RETURN_NONE;
    PyObject *exc = PyErr_GetHandledException();
    if (exc != NULL && exc != Py_None) {
        Frame *f = &t->stack[t->depth - 1];
        Py_XSETREF(f->err, Py_NewRef((PyObject *)Py_TYPE(exc)));
    }
    Py_XDECREF(exc);
    Py_RETURN_NONE;
}

static PyObject *probe_exit(ProbeObject *self, PyObject *unused) { pop(self->idx, NULL); Py_RETURN_NONE; }

static int probe_init(ProbeObject *self, PyObject *args, PyObject *kw) {
    int idx;
    if (!PyArg_ParseTuple(args, "i", &idx)) return -1;
    self->idx = idx;
    return 0;
}

static PyObject *probe_repr(ProbeObject *self) {
    PyObject *no = PyList_GetItem(names, self->idx);
    if (no == NULL) { PyErr_Clear(); return PyUnicode_FromFormat("<stepscope native probe %d>", self->idx); }
    return PyUnicode_FromFormat("<stepscope native probe %R>", PyTuple_GET_ITEM(no, 0));
}

static PyObject *probe_get_index(ProbeObject *self, void *c) { return PyLong_FromLong(self->idx); }

static PyMethodDef probe_methods[] = {
    {"enter", (PyCFunction)probe_enter, METH_NOARGS, "The traced call starts (pushes it on this thread's stack)."},
    {"error", (PyCFunction)probe_error, METH_NOARGS, "The call is ending by the exception being handled."},
    {"exit", (PyCFunction)probe_exit, METH_NOARGS, "The call ends: one finished record."},
    {NULL}};

static PyGetSetDef probe_getset[] = {{"index", (getter)probe_get_index, NULL, "code index (register)", NULL}, {NULL}};

static PyTypeObject ProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stepscope._native.Probe",
    .tp_basicsize = sizeof(ProbeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Probe(index): the native recorder's calls for the 3.11 instrumented code of one traced function.",
    .tp_methods = probe_methods,
    .tp_getset = probe_getset,
    .tp_init = (initproc)probe_init,
    .tp_new = PyType_GenericNew,
    .tp_repr = (reprfunc)probe_repr,
};

static PyMethodDef methods[] = {
    {"setup", py_setup, METH_VARARGS, "setup(current_span, error_name, DISABLE, max_pending)"},
    {"set_forward", py_set_forward, METH_VARARGS,
     "set_forward(start, resume, return, yield, throw, unwind): the Python callbacks for Python probes' codes"},
    {"register", py_register, METH_VARARGS,
     "register(name, op, probe=None, generator=False) -> code index (generator: 3.12+ sys.monitoring only)"},
    {"mark", py_mark, METH_VARARGS, "mark(code, value): co_extra value (0 untraced, 1 Python probe, 2+index native)"},
    {"next_id", py_next_id, METH_NOARGS, "A new span id (unique in the process, never 0)."},
    {"parent_of", py_parent_of, METH_O, "parent_of(current_span value) -> the parent id of a span opened now, or None"},
    {"top_name", py_top_name, METH_NOARGS, "The name of this thread's innermost open native span, or None."},
    {"take", py_take, METH_NOARGS, "The finished calls as span tuples (tracing.buffer.SPAN_FIELDS), oldest first."},
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

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "stepscope._native",
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
    if (names == NULL || probe_objs == NULL || parked == NULL || PyType_Ready(&ProbeType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Probe", (PyObject *)&ProbeType) < 0) return NULL;
    return m;
}
