/* stepscope.record.native._native: the outermost call of a denoiser's forward in C (declared in outer.h; issue 42).

   tracing.probes.Probe.enter and exit, for a denoiser's forward (steps.hooks.StepScoped) that no denoiser call encloses
   (the UNet's call of each step), made the same record the same way in Python: the step counted (the scope's
   counter after a traced scheduler step, else a new timestep argument object: StepScoped._tag), the memory and the
   thread's CPU wait read at the entry and the exit (memory.history.SpanMemory: the RSS, its high-water mark, the
   run-queue wait), a list made current in the ContextVar (tracing.probes' record) and a finished tuple appended to
   spans.buffer.finished. In Python that was ~95 us a denoising step on a cache cooled by the step (a frame per
   function, dicts, attribute lookups), of which the three system calls at each end are ~30 us. Here: the same
   system calls, the running frame's arguments read in place (stackwalk.c: running_args), its callers checked for a
   denoiser forward without a frame object (running_inside_denoiser), and no Python frame.

   Only the common case is taken here; every other goes to the Python probe, which handles them all (0 returned,
   nothing changed):
   - a start listener is registered (steps.hooks.add_start_listener: the device capture);
   - the program initialised CUDA (torch.cuda._initialized: the allocator's figures are read by the Python probe);
   - a caller runs a denoiser forward (a traced block inside an untraced UNet takes that call's step);
   - the module's first call (steps.workfacts.note_denoiser notes its facts), no step scope yet in this context
     (steps.hooks._current makes one), the thread's schedstat file not opened yet (steps.cpuwait.RunDelay opens it);
   - at the exit, a record not of this shape (CUDA figures in it, a marker) or not this code's.
   Errors are cleared: the Python probe then takes the call, and nothing reaches the program. */

#include "outer.h"

#include "gen.h"
#include "stackwalk.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* the second number of the text at offset 0 of fd (statm's resident pages, schedstat's run-queue wait ns), or -1 */
static long long second_field(int fd) {
    if (fd < 0) return -1;
    char buf[128];
    ssize_t got;
    do {
        got = pread(fd, buf, sizeof buf - 1, 0);
    } while (got < 0 && errno == EINTR);
    if (got <= 0) return -1;
    buf[got] = 0;
    char *sp = strchr(buf, ' ');
    return sp == NULL ? -1 : strtoll(sp + 1, NULL, 10);
}

/* the calling thread's last readings at a step-level span's exit: an entry within READ_REUSE_NS of it reuses them
   (outer.h). Each reading costs 9-15 us on a cache cooled by a denoising step (the kernel's paths cold; 1.2-1.8 us
   warm), and the spans follow each other: a denoiser's call, the scheduler's step, the next call */
#define READ_REUSE_NS 2000000
typedef struct {
    int64_t t;
    int statm, sched;
    long long rss, hwm, wait;
} LastRead;
static _Thread_local LastRead last_read;

/* the calling thread's run-queue wait (schedstat's second field) as last read, with its context switches then
   (getrusage's ru_nvcsw, ru_nivcsw): the wait grows only while the thread is off its CPU, which it leaves only by a
   switch counted in one of them (a preemption, a migration, a block then its wake-up's wait), so while neither moved
   the wait is the one read, exactly (run_delay_now: getrusage first, then schedstat). A read of schedstat cost a
   step ~20 us right after its torch work (the tiny UNet's generations +0.48%, 20 reads a generation, 500 pairs of
   generations alternating with none: /proc's seq_file), getrusage ~6 us, statm ~4; a busy step leaves its CPU seldom */
typedef struct {
    int fd;
    long nv, niv;
    long long wait;
} WaitRead;
static _Thread_local WaitRead wait_read = {-1, 0, 0, -1};

static long long run_delay_now(int sched, const struct rusage *ru) {
    if (sched < 0) return -1;
    if (ru != NULL && wait_read.fd == sched && wait_read.wait >= 0 && ru->ru_nvcsw == wait_read.nv &&
        ru->ru_nivcsw == wait_read.niv)
        return wait_read.wait;
    long long w = second_field(sched);
    wait_read = (WaitRead){ru != NULL && w >= 0 ? sched : -1, ru != NULL ? ru->ru_nvcsw : 0,
                           ru != NULL ? ru->ru_nivcsw : 0, w};
    return w;
}

static void thread_forget(void);
static void forget_at_fork(void) { /* (registered at the first reading or ask of the id, with the GIL held) */
    static int done;
    if (!done) done = pthread_atfork(NULL, NULL, thread_forget) == 0;
}

long long run_delay_read(int sched) {
    forget_at_fork();
    struct rusage ru;
    return run_delay_now(sched, sched >= 0 && getrusage(RUSAGE_THREAD, &ru) == 0 ? &ru : NULL);
}

void readings_now(int statm, long long page, int sched, int entry, long long *rss, long long *hwm, long long *wait) {
    if (entry && last_read.t > 0 && last_read.statm == statm && last_read.sched == sched &&
        now_ns() - last_read.t < READ_REUSE_NS) {
        *rss = last_read.rss, *hwm = last_read.hwm, *wait = last_read.wait;
        last_read.t = 0;
        return;
    }
    forget_at_fork();
    last_read.t = 0;
    struct rusage ru; /* (RUSAGE_THREAD: the process's high-water mark too, without a pass over its threads) */
    int ok = (statm >= 0 || sched >= 0) && getrusage(RUSAGE_THREAD, &ru) == 0;
    *wait = run_delay_now(sched, ok ? &ru : NULL);
    long long pages = second_field(statm);
    *rss = pages >= 0 ? pages * page : -1;
    *hwm = statm >= 0 && ok ? (long long)ru.ru_maxrss * 1024 : -1;
    if (!entry) last_read = (LastRead){now_ns(), statm, sched, *rss, *hwm, *wait};
}

/* the calling thread's OS id, asked of the kernel once per thread (PyThread_get_thread_native_id is a gettid system
   call each time: with the schedstat file looked up by it at each end of a step-level span, four a denoising step,
   each a cold kernel entry after the step's torch work); a forked child's thread asks again (thread_forget) */
static _Thread_local unsigned long my_tid;
static void thread_forget(void) { /* (a forked child's one thread: its id, its wait's files and counts its own) */
    my_tid = 0;
    wait_read.fd = -1;
    last_read.t = 0;
}
unsigned long thread_tid(void) {
    if (my_tid == 0) {
        forget_at_fork();
        my_tid = PyThread_get_thread_native_id();
    }
    return my_tid;
}

#ifdef STEPSCOPE_STACKWALK

static PyObject *g_probes, *g_scope, *g_append, *g_noted, *g_listeners, *g_prefixes;
static Py_ssize_t g_max_noted;
static long long g_page;
static int16_t *ts_of; /* code index -> its timestep argument's index (-1: none; -2: not decided yet) */
static Py_ssize_t cap_ts;
static PyObject *k_step, *k_wait_in, *k_wait_ns, *k_rss_in, *k_hwm, *k_rss_out, *k_rss_peak, *k_cuda_in, *k_cuda_hwm,
    *s_marked, *s_counter, *s_last_t, *s_seen, *s_span_memory, *s_rss, *s_fd, *s_run_delay, *s_fds, *s_ok, *s_torch,
    *s_cuda, *s_initialized, *s_read;

/* the index of code co's timestep argument (by name, else its third), as steps.hooks._denoiser_args; -3 no memory */
static int ts_index(int32_t idx, PyCodeObject *co) {
    if (idx >= cap_ts) {
        Py_ssize_t cap = cap_ts ? cap_ts : 64;
        while (cap <= idx) cap *= 2;
        int16_t *t = (int16_t *)realloc(ts_of, cap * sizeof *t);
        if (t == NULL) return -3;
        for (Py_ssize_t i = cap_ts; i < cap; i++) t[i] = -2;
        ts_of = t;
        cap_ts = cap;
    }
    if (ts_of[idx] != -2) return ts_of[idx];
    int n = co->co_argcount + co->co_kwonlyargcount, ts = -1;
    PyObject *names = PyCode_GetVarnames(co);
    if (names == NULL) { PyErr_Clear(); return -3; }
    for (int i = 0; i < n && i < PyTuple_GET_SIZE(names) && ts < 0; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names, i), "timestep") == 0) ts = i;
    Py_DECREF(names);
    if (ts < 0 && n > 2) ts = 2;
    return ts_of[idx] = (int16_t)ts;
}

/* whether the program initialised CUDA (or it cannot be told): memory.history.CudaReader's test, without its call */
static int cuda_on(void) {
    PyObject *torch = PyImport_GetModule(s_torch);
    if (torch == NULL) { if (PyErr_Occurred()) { PyErr_Clear(); return 1; } return 0; }
    PyObject *cuda = PyObject_GetAttr(torch, s_cuda);
    Py_DECREF(torch);
    if (cuda == NULL) { PyErr_Clear(); return 0; }
    PyObject *init = PyObject_GetAttr(cuda, s_initialized);
    Py_DECREF(cuda);
    if (init == NULL) { PyErr_Clear(); return 1; }
    int on = PyObject_IsTrue(init);
    Py_DECREF(init);
    if (on < 0) { PyErr_Clear(); return 1; }
    return on;
}

/* tracing.probes._in_measured: an open step-level span that read memory encloses the call (rec: the current record) */
static int in_measured(PyObject *rec) {
    for (int n = 0; rec != NULL && PyList_CheckExact(rec) && PyList_GET_SIZE(rec) == REC_LEN && n < 64; n++) {
        PyObject *a = PyList_GET_ITEM(rec, REC_ATTRS);
        if (PyDict_Check(a) && PyDict_Contains(a, k_rss_in) == 1 && PyDict_Contains(a, k_step) == 1) return 1;
        rec = PyList_GET_ITEM(rec, REC_RESTORE);
    }
    PyErr_Clear();
    return 0;
}

/* an int attribute (a slot) of o, or dflt */
static long long int_attr(PyObject *o, PyObject *name, long long dflt) {
    PyObject *v = o != NULL ? PyObject_GetAttr(o, name) : NULL;
    long long x = v != NULL && PyLong_Check(v) ? PyLong_AsLongLong(v) : dflt;
    Py_XDECREF(v);
    if (PyErr_Occurred()) { PyErr_Clear(); x = dflt; }
    return x;
}

/* this thread's schedstat descriptor of the span memory's RunDelay: its fd, -1 when it cannot be read, -2 when not
   opened yet (the Python probe opens it) */
static int sched_fd(PyObject *mem) {
    PyObject *rd = PyObject_GetAttr(mem, s_run_delay);
    if (rd == NULL) { PyErr_Clear(); return -2; }
    int fd = -2;
    if (int_attr(rd, s_ok, 0) == 0) {
        fd = -1;
    } else {
        PyObject *fds = PyObject_GetAttr(rd, s_fds);
        PyObject *key = PyLong_FromUnsignedLong(thread_tid());
        PyObject *v = fds != NULL && key != NULL && PyDict_Check(fds) ? PyDict_GetItemWithError(fds, key) : NULL;
        if (v != NULL && PyLong_Check(v)) fd = (int)PyLong_AsLong(v);
        Py_XDECREF(fds);
        Py_XDECREF(key);
        if (PyErr_Occurred()) { PyErr_Clear(); fd = -2; }
    }
    Py_DECREF(rd);
    return fd;
}

/* the wait read again by the RunDelay (a descriptor of an ended thread whose id came back: opened anew), or -1 */
static long long wait_again(PyObject *mem) {
    PyObject *rd = PyObject_GetAttr(mem, s_run_delay);
    PyObject *v = rd != NULL ? PyObject_CallMethodNoArgs(rd, s_read) : NULL;
    long long w = v != NULL && PyLong_Check(v) ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(rd);
    Py_XDECREF(v);
    if (PyErr_Occurred()) { PyErr_Clear(); w = -1; }
    return w;
}

static int set_ll(PyObject *d, PyObject *k, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    int r = o == NULL ? -1 : PyDict_SetItem(d, k, o);
    Py_XDECREF(o);
    return r;
}

/* StepScoped._tag for a call that is not nested: the step, or -1 with an exception set */
static long long tag(PyObject *s, PyObject *t) {
    PyObject *m = PyObject_GetAttr(s, s_marked);
    int marked = m == NULL ? -1 : PyObject_IsTrue(m);
    Py_XDECREF(m);
    if (marked < 0) return -1;
    if (marked) return int_attr(s, s_counter, -1);
    PyObject *last = PyObject_GetAttr(s, s_last_t);
    if (last == NULL) return -1;
    long long seen = int_attr(s, s_seen, -1);
    Py_DECREF(last); /* (compared by identity only, as the Python probe does) */
    if (seen < 0) return -1;
    if (t != last || seen == 0) {
        PyObject *n = PyLong_FromLongLong(seen + 1);
        if (n == NULL || PyObject_SetAttr(s, s_last_t, t) < 0 || PyObject_SetAttr(s, s_seen, n) < 0) {
            Py_XDECREF(n);
            return -1;
        }
        Py_DECREF(n);
        seen++;
    }
    return seen - 1;
}

int outer_enter(int32_t idx) {
    if (g_probes == NULL || PyList_GET_SIZE(g_listeners) > 0) return 0;
    PyObject *vals[64];
    PyCodeObject *co;
    if (running_args(vals, 0, &co) < 0) return 0;
    int ts = ts_index(idx, co), nargs = co->co_argcount + co->co_kwonlyargcount;
    int n = ts + 1 > (nargs < 2 ? nargs : 2) ? ts + 1 : (nargs < 2 ? nargs : 2);
    if (ts < -1 || n > 64 || running_args(vals, n, &co) < 0) return 0;
    PyObject *mod = n > 0 ? vals[0] : NULL, *t = ts >= 0 && vals[ts] != NULL ? vals[ts] : Py_None;
    if (mod != NULL && mod != Py_None && PyDict_GET_SIZE(g_noted) < g_max_noted) {
        PyObject *key = PyLong_FromVoidPtr(mod);
        int noted = key == NULL ? -1 : PyDict_Contains(g_noted, key);
        Py_XDECREF(key);
        if (noted != 1) { PyErr_Clear(); return 0; }
    }
    if (cuda_on()) return 0;
    int inside = running_inside_denoiser(g_prefixes);
    if (inside != 0) { PyErr_Clear(); return 0; }
    PyObject *s = NULL;
    if (PyContextVar_Get(g_scope, NULL, &s) < 0) { PyErr_Clear(); return 0; }
    if (s == NULL || s == Py_None) { Py_XDECREF(s); return 0; }
    PyObject *prev = cv_get();
    PyObject *mem = PyDict_GetItemWithError(g_probes, s_span_memory); /* (borrowed: tracing.probes.span_memory) */
    int statm = -1, sched = -1, read = mem != NULL && mem != Py_None && !in_measured(prev);
    if (read) {
        PyObject *rss = PyObject_GetAttr(mem, s_rss);
        statm = (int)int_attr(rss, s_fd, -1);
        Py_XDECREF(rss);
        sched = sched_fd(mem);
    }
    PyErr_Clear();
    long long step = sched == -2 ? -1 : tag(s, t);
    Py_DECREF(s);
    PyObject *attrs = step >= 0 ? PyDict_New() : NULL;
    if (attrs == NULL || set_ll(attrs, k_step, step) < 0) goto fail;
    if (read) { /* (before the start is taken: the reads are not in the span's time) */
        long long rss, hwm, w;
        readings_now(statm, g_page, sched, 1, &rss, &hwm, &w);
        if (w < 0 && sched >= 0) w = wait_again(mem);
        if ((w >= 0 && set_ll(attrs, k_wait_in, w) < 0)
            || (rss >= 0 && (set_ll(attrs, k_rss_in, rss) < 0 || set_ll(attrs, k_hwm, hwm) < 0)))
            goto fail;
    }
    int64_t parent = parent_now(prev), sid = ++last_sid;
    PyObject *rec = PyList_New(REC_LEN);
    if (rec == NULL) goto fail;
    PyList_SET_ITEM(rec, REC_ID, PyLong_FromLongLong(sid));
    PyList_SET_ITEM(rec, REC_START, PyLong_FromLongLong(now_ns()));
    PyList_SET_ITEM(rec, REC_PARENT, opt_id(parent));
    PyList_SET_ITEM(rec, REC_PROBE, Py_NewRef(PyList_GET_ITEM(probe_objs, idx)));
    PyList_SET_ITEM(rec, REC_ATTRS, attrs);
    PyList_SET_ITEM(rec, REC_NAME, Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(names, idx), 0)));
    PyList_SET_ITEM(rec, REC_ERROR, Py_NewRef(Py_None));
    PyList_SET_ITEM(rec, REC_RESTORE, prev);
    if (PyList_GET_ITEM(rec, REC_ID) == NULL || PyList_GET_ITEM(rec, REC_START) == NULL
        || PyList_GET_ITEM(rec, REC_PARENT) == NULL) { /* (out of memory: the call goes unrecorded) */
        PyErr_Clear();
        Py_DECREF(rec);
        return 1;
    }
    cv_set(rec);
    Py_DECREF(rec);
    return 1;
fail:
    PyErr_Clear();
    Py_XDECREF(attrs);
    Py_DECREF(prev);
    return step >= 0 ? 1 : 0; /* (counted already: the Python probe would count it again) */
}

int outer_exit(int32_t idx) {
    if (g_probes == NULL) return 0;
    PyObject *rec = cv_get(), *attrs;
    if (!PyList_CheckExact(rec) || PyList_GET_SIZE(rec) != REC_LEN
        || PyList_GET_ITEM(rec, REC_PROBE) != PyList_GET_ITEM(probe_objs, idx)
        || PyList_GET_ITEM(rec, REC_ID) == Py_None || !PyDict_CheckExact(attrs = PyList_GET_ITEM(rec, REC_ATTRS))
        || PyDict_Contains(attrs, k_cuda_in) != 0 || PyDict_Contains(attrs, k_cuda_hwm) != 0) {
        PyErr_Clear();
        Py_DECREF(rec);
        return 0;
    }
    PyObject *mem = PyDict_GetItemWithError(g_probes, s_span_memory);
    PyObject *w0 = mem != NULL && mem != Py_None ? PyDict_GetItemWithError(attrs, k_wait_in) : NULL; /* borrowed */
    int has_rss = mem != NULL && mem != Py_None && PyDict_Contains(attrs, k_rss_in) == 1;
    PyErr_Clear();
    if (w0 != NULL || has_rss) { /* SpanMemory.exit (before the end is taken) */
        int sched = w0 != NULL ? sched_fd(mem) : -1, statm = -1;
        if (sched == -2) { Py_DECREF(rec); return 0; }
        if (has_rss) {
            PyObject *rss = PyObject_GetAttr(mem, s_rss);
            statm = (int)int_attr(rss, s_fd, -1);
            Py_XDECREF(rss);
        }
        long long rss, hwm, w;
        readings_now(statm, g_page, sched, 0, &rss, &hwm, &w);
        if (w0 != NULL) {
            if (w < 0 && sched >= 0) w = wait_again(mem);
            long long before = PyLong_Check(w0) ? PyLong_AsLongLong(w0) : -1;
            if (before >= 0 && w >= before && set_ll(attrs, k_wait_ns, w - before) < 0) PyErr_Clear();
        }
        if (has_rss) {
            if (set_ll(attrs, k_rss_out, rss) < 0) PyErr_Clear();
            PyObject *h = PyDict_GetItemWithError(attrs, k_hwm);
            long long hwm0 = h != NULL && PyLong_Check(h) ? PyLong_AsLongLong(h) : -1;
            if (h != NULL && PyDict_DelItem(attrs, k_hwm) < 0) PyErr_Clear();
            if (hwm0 >= 0 && hwm > hwm0 && set_ll(attrs, k_rss_peak, hwm) < 0) PyErr_Clear();
            PyErr_Clear();
        }
    }
    int64_t end = now_ns();
    PyObject *no = PyList_GET_ITEM(names, idx);
    PyObject *fin = PyTuple_New(9);
    PyObject *e = PyLong_FromLongLong(end), *tid = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (fin == NULL || e == NULL || tid == NULL) {
        PyErr_Clear();
        Py_XDECREF(fin);
        Py_XDECREF(e);
        Py_XDECREF(tid);
    } else { /* (spans.buffer.SPAN_FIELDS: id, parent, name, op, start, end, thread, error, attrs) */
        PyTuple_SET_ITEM(fin, 0, Py_NewRef(PyList_GET_ITEM(rec, REC_ID)));
        PyTuple_SET_ITEM(fin, 1, Py_NewRef(PyList_GET_ITEM(rec, REC_PARENT)));
        PyTuple_SET_ITEM(fin, 2, Py_NewRef(PyList_GET_ITEM(rec, REC_NAME)));
        PyTuple_SET_ITEM(fin, 3, Py_NewRef(PyTuple_GET_ITEM(no, 1)));
        PyTuple_SET_ITEM(fin, 4, Py_NewRef(PyList_GET_ITEM(rec, REC_START)));
        PyTuple_SET_ITEM(fin, 5, e);
        PyTuple_SET_ITEM(fin, 6, tid);
        PyTuple_SET_ITEM(fin, 7, Py_NewRef(PyList_GET_ITEM(rec, REC_ERROR)));
        PyTuple_SET_ITEM(fin, 8, Py_NewRef(attrs));
        PyObject *r = PyObject_CallOneArg(g_append, fin);
        if (r == NULL) PyErr_Clear();
        Py_XDECREF(r);
        Py_DECREF(fin);
    }
    cv_set(PyList_GET_ITEM(rec, REC_RESTORE));
    Py_DECREF(rec);
    return 1;
}

static PyObject *intern(const char *s) { return PyUnicode_InternFromString(s); }

PyObject *py_outer_setup(PyObject *m, PyObject *args) {
    PyObject *probes_globals, *scope, *finished, *noted, *listeners, *prefixes;
    Py_ssize_t max_noted;
    long long page;
    if (PyTuple_GET_SIZE(args) == 1 && PyTuple_GET_ITEM(args, 0) == Py_None) {
        Py_CLEAR(g_probes);
        Py_RETURN_NONE;
    }
    if (!PyArg_ParseTuple(args, "O!OOO!nO!O!L:outer_setup", &PyDict_Type, &probes_globals, &scope, &finished,
                          &PyDict_Type, &noted, &max_noted, &PyList_Type, &listeners, &PyTuple_Type, &prefixes, &page))
        return NULL;
    if (k_step == NULL) {
        k_step = intern("diffusion.step"), k_wait_in = intern("cpu.wait_in"), k_wait_ns = intern("cpu.wait_ns");
        k_rss_in = intern("memory.rss_in"), k_hwm = intern("_memory.hwm"), k_rss_out = intern("memory.rss_out");
        k_rss_peak = intern("memory.rss_peak"), k_cuda_in = intern("memory.cuda_in");
        k_cuda_hwm = intern("_memory.cuda_hwm"), s_marked = intern("marked"), s_counter = intern("counter");
        s_last_t = intern("last_t"), s_seen = intern("seen"), s_span_memory = intern("span_memory");
        s_rss = intern("rss"), s_fd = intern("fd"), s_run_delay = intern("run_delay"), s_fds = intern("_fds");
        s_ok = intern("ok"), s_torch = intern("torch"), s_cuda = intern("cuda"), s_initialized = intern("_initialized");
        s_read = intern("read");
        if (PyErr_Occurred()) return NULL;
    }
    PyObject *append = PyObject_GetAttrString(finished, "append");
    if (append == NULL) return NULL;
    Py_XSETREF(g_append, append);
    Py_XSETREF(g_scope, Py_NewRef(scope));
    Py_XSETREF(g_noted, Py_NewRef(noted));
    Py_XSETREF(g_listeners, Py_NewRef(listeners));
    Py_XSETREF(g_prefixes, Py_NewRef(prefixes));
    g_max_noted = max_noted;
    g_page = page;
    Py_XSETREF(g_probes, Py_NewRef(probes_globals)); /* (last: it turns the path on) */
    Py_RETURN_NONE;
}

#else /* no running-frame reads on this interpreter: every outermost call on the Python probe */

int outer_enter(int32_t idx) { return 0; }
int outer_exit(int32_t idx) { return 0; }

PyObject *py_outer_setup(PyObject *m, PyObject *args) { Py_RETURN_NONE; }

#endif
