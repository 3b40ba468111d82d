/* stepscope.record.native._native: the tracer's hot path in C (issue 31); this file is the module (its functions,
   their table and its init). The parts:

   recorder.c/.h  the state: per-thread stacks of open calls (push at a call's start, pop at its end: one fixed-size
                  record into preallocated columns: span id, parent id, code index, start, end, thread, exception
                  type), the code table, denoisers' steps
   monitor.c/.h   Python 3.12+: the sys.monitoring callbacks themselves (PEP 669)
   probes.c/.h    Python 3.11: the Probe objects the instrumented code calls (tracing.codeswap)
   gen.c/.h       the ContextVar's records; generators, coroutines and async generators on 3.12+
   block.c/.h     take_block: finished calls straight into a span block (core/spanformat.py's layout)
   stackwalk.c/.h the sampler's stack walk (Walker): every thread's Python stack read from its interpreter frames,
                  with no frame object, into tables of frames and stacks (3.11 to 3.13; sampling/sampler.py)
   threads.c      the Walker's per-thread accounting between looks (CPU clocks, the idle rule, the charges);
                  walker.h: the Walker's struct and helpers, shared by stackwalk.c and threads.c
   (this file)    also park: the recorder thread's wait, unseen by a profiler the program starts (3.12+)

   A plain traced function (no hooks, no subclass filter, not a generator or coroutine) is recorded here; the
   recorder thread drains the columns (take: span tuples of spans.buffer.SPAN_FIELDS; take_block: span blocks).
   Generators, coroutines and async generators (3.12+, registered with kind 1) keep the Python recorder's records
   (gen.h). Denoisers (kind 2: the forward of a traced diffusers UNet or transformer without a device mirror, see
   steps.hooks): a call inside an open denoiser call is recorded here with that call's step, which take() writes
   into the span's attrs (diffusion.step, diffusion.nested); any other call of such code (the outermost denoiser:
   its step is counted, its memory read) is handed to its Python probe. Which probes come here:
   tracing/recorder.py; the loader: record/native/__init__.py; the stub of what this module exposes: _native.pyi. */

#include "recorder.h"

#include <errno.h>
#include <signal.h>
#ifdef __linux__
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>
#endif

#include "block.h"
#include "gen.h"
#include "monitor.h"
#include "outer.h"
#include "probes.h"
#include "stackwalk.h"
#include "sigtick.h"

#ifdef STEPSCOPE_STACKWALK
PyObject *own_signal(PyObject *module, PyObject *arg); /* (ownclock.c) */
#endif

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
    PyObject *cb[EV_COUNT];
    if (!PyArg_ParseTuple(args, "OOOOOO", &cb[0], &cb[1], &cb[2], &cb[3], &cb[4], &cb[5])) return NULL;
    for (int i = 0; i < EV_COUNT; i++) Py_XSETREF(forward[i], cb[i] == Py_None ? NULL : Py_NewRef(cb[i]));
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

static PyObject *py_next_id(PyObject *m, PyObject *unused) {
    /* (a span of the Python recorder's starts: as a native call's push, it ends a recorder's rest) */
    if (__builtin_expect(call_wake_on, 0)) fire_call_wake();
    return PyLong_FromLongLong(++last_sid);
}

static PyObject *py_last_call_wake(PyObject *m, PyObject *unused) {
    /* (when and in which thread the last span that woke a resting recorder started: call_wake) */
    if (call_wakes == 0) Py_RETURN_NONE;
    return Py_BuildValue("(Lk)", (long long)call_wake_t, call_wake_tid);
}

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
    /* the finished calls as span tuples (SPAN_FIELDS), oldest first; those taken removed from the columns. Only the
       calls there at the call are taken: error_name and each allocation may run Python code (the garbage collector's
       too), which can hand the GIL to a thread that finishes more calls (and moves recs); those stay for the next
       take, as take_block's do. */
    Py_ssize_t n = n_fin, i = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (; i < n && i < n_fin; i++) { /* (n_fin below n only after a clear meanwhile) */
        PyObject *err;
        if (recs[i].err != NULL) {
            err = PyObject_CallOneArg(error_name, recs[i].err);
            if (err == NULL) { PyErr_Clear(); err = Py_NewRef(Py_None); }
        } else {
            err = Py_NewRef(Py_None);
        }
        if (i >= n_fin) { Py_DECREF(err); break; }
        PyObject *attrs = recs[i].step >= 0 ? Py_BuildValue("{ONOO}", step_key, PyLong_FromLongLong(recs[i].step),
                                                         nested_key, Py_True) : Py_NewRef(Py_None);
        PyObject *t = PyTuple_New(9); /* (built item by item: Py_BuildValue's format parsing was half the cost) */
        if (t == NULL || attrs == NULL || i >= n_fin) {
            Py_XDECREF(t); Py_XDECREF(attrs); Py_DECREF(err);
            if (i >= n_fin) break;
            Py_DECREF(out);
            return NULL;
        }
        Rec r = recs[i]; /* (after the allocations: recs may have moved) */
        PyObject *no = PyList_GET_ITEM(names, r.idx);
        PyTuple_SET_ITEM(t, 0, PyLong_FromLongLong(r.sid));
        PyTuple_SET_ITEM(t, 1, opt_id(r.parent));
        PyTuple_SET_ITEM(t, 2, Py_NewRef(PyTuple_GET_ITEM(no, 0)));
        PyTuple_SET_ITEM(t, 3, Py_NewRef(PyTuple_GET_ITEM(no, 1)));
        PyTuple_SET_ITEM(t, 4, PyLong_FromLongLong(r.start));
        PyTuple_SET_ITEM(t, 5, PyLong_FromLongLong(r.end));
        PyTuple_SET_ITEM(t, 6, PyLong_FromUnsignedLong(r.tid));
        PyTuple_SET_ITEM(t, 7, err);
        PyTuple_SET_ITEM(t, 8, attrs);
        int bad = 0;
        for (int k = 0; k < 7; k++) bad |= PyTuple_GET_ITEM(t, k) == NULL;
        if (bad || PyList_Append(out, t) < 0) { Py_DECREF(t); Py_DECREF(out); return NULL; }
        Py_DECREF(t);
    }
    Py_ssize_t k = PyList_GET_SIZE(out);
    for (Py_ssize_t j = 0; j < k && j < n_fin; j++) Py_CLEAR(recs[j].err); /* (a free may run Python code too) */
    Py_ssize_t rest = n_fin - k;
    if (rest > 0) memmove(recs, recs + k, sizeof(Rec) * rest);
    n_fin = rest > 0 ? rest : 0;
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

static PyObject *py_open_calls(PyObject *m, PyObject *unused) {
    /* how many native calls are open now, every thread's (the recorder rests early only outside any) */
    Py_ssize_t n = 0;
    pthread_mutex_lock(&states_lock);
    for (TState *t = states; t != NULL; t = t->next) n += t->depth;
    pthread_mutex_unlock(&states_lock);
    return PyLong_FromSsize_t(n);
}

static PyObject *py_call_wake(PyObject *m, PyObject *arg) {
    /* call_wake(timer_id): the next traced call to start arms that timer to expire at once (a resting recorder's
       wake, cpuwake.CpuWake); call_wake(-1): none does. Returns how many calls have woken one so far. */
    long long id = PyLong_AsLongLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (id >= 0) call_wake_timer = (timer_t)(intptr_t)id;
    call_wake_on = id >= 0;
    return PyLong_FromLongLong(call_wakes);
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

/* ---- reads that keep the GIL ------------------------------------------------------------------------------ */

/* read_held(fd, n, offset=-1) -> bytes: read(2) (offset < 0) or pread(2) of at most n bytes, with the GIL kept. For
   the recorder thread's reads of a few bytes that never block (a /proc file, a non-blocking pipe): os.read and
   os.pread release the GIL, and on a busy process each release hands it to a thread that runs Python, which the
   recorder must then wait for (up to the switch interval) to get it back. b"" when nothing is there (EAGAIN);
   OSError otherwise. */
static PyObject *py_read_held(PyObject *self, PyObject *args) {
    int fd;
    Py_ssize_t n;
    long long offset = -1;
    if (!PyArg_ParseTuple(args, "in|L:read_held", &fd, &n, &offset)) return NULL;
    if (n < 0 || n > 65536) {
        PyErr_SetString(PyExc_ValueError, "read_held: n is 0 to 65536");
        return NULL;
    }
    char buf[4096], *p = buf;
    if (n > (Py_ssize_t)sizeof buf && (p = PyMem_Malloc(n)) == NULL) return PyErr_NoMemory();
    ssize_t got;
    do {
        got = offset >= 0 ? pread(fd, p, (size_t)n, (off_t)offset) : read(fd, p, (size_t)n);
    } while (got < 0 && errno == EINTR);
    PyObject *out;
    if (got < 0) out = errno == EAGAIN || errno == EWOULDBLOCK ? PyBytes_FromStringAndSize("", 0)
                                                               : PyErr_SetFromErrno(PyExc_OSError);
    else out = PyBytes_FromStringAndSize(p, got);
    if (p != buf) PyMem_Free(p);
    return out;
}

/* readings(statm_fd, page, schedstat_fd) -> (rss, hwm, wait): a step-level span's memory and CPU-wait readings in
   one call (memory.history.SpanMemory): the RSS (bytes, /proc/self/statm's resident pages x page), the kernel's
   high-water mark of the RSS (bytes, getrusage's ru_maxrss, KiB on Linux) and the calling thread's run-queue wait so
   far (ns, /proc/thread-self/schedstat's second field); -1 for each that cannot be read (an fd < 0: not read). The
   GIL is kept (three short system calls: outer.c's readings_now). entry (0 by default): a span's entry, which
   reuses the thread's last exit readings of the same files when they are under 2 ms old (readings_now). */
static PyObject *py_readings(PyObject *self, PyObject *args) {
    int statm, sched, entry = 0;
    long long page, rss, hwm, wait;
    if (!PyArg_ParseTuple(args, "iLi|p:readings", &statm, &page, &sched, &entry)) return NULL;
    readings_now(statm, page, sched, entry, &rss, &hwm, &wait);
    return Py_BuildValue("(LLL)", rss, hwm, wait);
}

/* run_delay(schedstat_fd) -> the calling thread's run-queue wait (ns), -1 unread: schedstat read again only when the
   thread left its CPU since its last read (outer.c's run_delay_read) */
static PyObject *py_run_delay(PyObject *self, PyObject *arg) {
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(fd >= 0 && fd <= INT_MAX ? run_delay_read((int)fd) : -1);
}

/* thread_id() -> the calling thread's OS id (threading.get_native_id()), without a system call after its first */
static PyObject *py_thread_id(PyObject *self, PyObject *noargs) { return PyLong_FromUnsignedLong(thread_tid()); }

/* ---- the recorder thread's wait, unseen by the program's own profiler ------------------------------------ */

/* thread_hooked(ident) -> bool: whether the thread of that ident (threading.get_ident) has a setprofile/settrace
   function of its own (per thread: unseen from any other thread in Python); False for no such thread */
static PyObject *py_thread_hooked(PyObject *m, PyObject *arg) {
    unsigned long id = PyLong_AsUnsignedLong(arg);
    if (id == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(me->interp); ts != NULL; ts = PyThreadState_Next(ts))
        if (ts->thread_id == id) return PyBool_FromLong(ts->c_profilefunc != NULL || ts->c_tracefunc != NULL);
    Py_RETURN_FALSE;
}

static PyObject *get_tool_fn = NULL; /* sys.monitoring.get_tool (3.12+), fetched at the first park */

int foreign_tool(void) {
    /* 1 when a tool other than stepscope's would see this thread's calls: a sys.monitoring tool (ids 0-5, 3.12+:
       cProfile, coverage, a debugger) or this thread's own setprofile/settrace (threading.setprofile_all_threads);
       0 if none; -1 with an exception set. Every call here is made from C: no CALL event reaches any tool. */
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_profilefunc != NULL || ts->c_tracefunc != NULL) return 1;
#if PY_VERSION_HEX >= 0x030C0000
    if (get_tool_fn == NULL) {
        PyObject *mon = PySys_GetObject("monitoring"); /* borrowed */
        if (mon == NULL) return 0;
        get_tool_fn = PyObject_GetAttrString(mon, "get_tool");
        if (get_tool_fn == NULL) return -1;
    }
    for (int i = 0; i < 6; i++) {
        PyObject *id = PyLong_FromLong(i);
        if (id == NULL) return -1;
        PyObject *name = PyObject_CallOneArg(get_tool_fn, id);
        Py_DECREF(id);
        if (name == NULL) return -1;
        int other = name != Py_None && !(PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "stepscope") == 0);
        Py_DECREF(name);
        if (other) return 1;
    }
#endif
    return 0;
}

static int wait_signal(int signum, double timeout, int fd) {
    /* Wait up to timeout s for signum, blocked in this thread, to be pending (the GIL released): 1 when it came
       (taken), or when fd (>= 0: a pipe's read end, left unread) became readable; 0 after the timeout; -1 with an
       exception set. Without fd: sigtimedwait(2); with one: ppoll(2) on fd and on a signalfd(2) of signum made for
       this wait and closed after it (an fd kept across waits could be closed, and its number reused, by the
       program). Another signal's handler that interrupts the wait (EINTR) does not end it: it goes on for the
       time left. */
#ifdef __linux__
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signum);
    int sfd = fd >= 0 ? signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC) : -1;
    if (sfd < 0) fd = -1; /* (no signalfd: the signal alone) */
    struct timespec end, now, left;
    clock_gettime(CLOCK_MONOTONIC, &end);
    long long end_ns = (long long)end.tv_sec * 1000000000LL + end.tv_nsec + (long long)(timeout > 0 ? timeout * 1e9 : 0);
    int r, got = -2;
    while (got == -2) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long rest = end_ns - ((long long)now.tv_sec * 1000000000LL + now.tv_nsec);
        if (rest < 0) rest = 0;
        left.tv_sec = (time_t)(rest / 1000000000LL);
        left.tv_nsec = (long)(rest % 1000000000LL);
        if (fd < 0) {
            Py_BEGIN_ALLOW_THREADS
            r = sigtimedwait(&set, NULL, &left);
            Py_END_ALLOW_THREADS
            if (r == signum) got = 1;
            else if (r < 0 && errno == EAGAIN) got = 0;
        } else {
            struct pollfd p[2] = {{sfd, POLLIN, 0}, {fd, POLLIN, 0}};
            Py_BEGIN_ALLOW_THREADS
            r = ppoll(p, 2, &left, NULL);
            Py_END_ALLOW_THREADS
            if (r == 0) got = 0;
            else if (r > 0) {
                if (p[0].revents & POLLIN) {
                    struct signalfd_siginfo info;
                    while (read(sfd, &info, sizeof info) == (ssize_t)sizeof info) {
                    }
                }
                got = 1;
            }
        }
        if (got == -2 && r < 0 && errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            got = -1;
        }
    }
    if (sfd >= 0) close(sfd);
    return got;
#else
    PyErr_SetString(PyExc_NotImplementedError, "park on a signal: Linux only");
    return -1;
#endif
}

static PyObject *py_park(PyObject *m, PyObject *args) {
    /* park(lock, timeout_s, poll_s, finished, limit) -> 0, 1, 2 or 3. Wait on lock (acquire with timeout_s) as
       the recorder thread does between looks; returns 1 when it was acquired (released again: a wake-up), else
       checks for a foreign tool (foreign_tool) and returns 0 when none is there. While one is, it keeps waiting
       (poll_s a wait) without returning to Python code, whose calls the tool would see, and returns 2 once the
       tool is gone, or 3 when the finished spans waiting (len(finished) + the C columns) reach limit.
       lock may be a signal number instead (Linux): the wait is then for that signal, blocked in this thread, or
       for fd to become readable (wait_signal), and 1 means one of them came. */
    PyObject *lock, *finished;
    double timeout, poll;
    Py_ssize_t limit;
    int fd = -1;
    if (!PyArg_ParseTuple(args, "OddOn|i", &lock, &timeout, &poll, &finished, &limit, &fd)) return NULL;
    int signum = -1;
    if (PyLong_Check(lock)) {
        signum = (int)PyLong_AsLong(lock);
        if (signum <= 0 || signum >= 65) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "park: not a signal number");
            return NULL;
        }
    }
    int seen = 0;
    for (;;) {
        int got;
        if (signum > 0) {
            got = wait_signal(signum, timeout, fd);
            if (got < 0) return NULL;
            if (got) return PyLong_FromLong(1);
        } else {
            PyObject *r = PyObject_CallMethod(lock, "acquire", "id", 1, timeout > 0 ? timeout : 0.0);
            if (r == NULL) return NULL;
            got = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (got < 0) return NULL;
        }
        if (got) {
            PyObject *r = PyObject_CallMethod(lock, "release", NULL);
            if (r == NULL) return NULL;
            Py_DECREF(r);
            return PyLong_FromLong(1);
        }
        int f = foreign_tool();
        if (f < 0) return NULL;
        if (!f) return PyLong_FromLong(seen ? 2 : 0);
        seen = 1;
        Py_ssize_t waiting = PyObject_Size(finished); /* (a deque: its C length, no call event) */
        if (waiting < 0) return NULL;
        if (waiting + n_fin >= limit) return PyLong_FromLong(3);
        timeout = poll;
    }
}

static PyMethodDef methods[] = {
    {"setup", py_setup, METH_VARARGS, "setup(current_span, error_name, DISABLE, max_pending)"},
    {"set_forward", py_set_forward, METH_VARARGS,
     "set_forward(start, resume, return, yield, throw, unwind): the Python callbacks for Python probes' codes"},
    {"register", py_register, METH_VARARGS,
     "register(name, op, probe=None, kind=0) -> code index (kind 0 plain, 1 generator: 3.12+ sys.monitoring only, "
     "2 denoiser: the Python probe takes its outermost calls)"},
    {"mark", py_mark, METH_VARARGS, "mark(code, value): co_extra value (0 untraced, 1 Python probe, 2+index native)"},
#ifdef STEPSCOPE_STACKWALK
    {"frame_args", frame_args, METH_VARARGS,
     "frame_args(frame, n) -> tuple: the frame's first n local variables (its arguments; None: unset), read in place"},
    {"outer_setup", py_outer_setup, METH_VARARGS,
     "outer_setup(probes_globals, scope_var, finished, noted, max_noted, start_listeners, prefixes, page), or "
     "outer_setup(None): the outermost denoiser calls recorded in C (outer.c), or not"},
    {"outer_denoiser", outer_denoiser, METH_VARARGS,
     "outer_denoiser(frame, prefixes) -> None, frame, or True: the outermost denoiser forward (a caller: True)"},
#endif
    {"readings", py_readings, METH_VARARGS,
     "readings(statm_fd, page, schedstat_fd, entry=False) -> (rss bytes, RSS high-water mark bytes, run-queue wait ns), "
     "-1: unread"},
    {"run_delay", py_run_delay, METH_O,
     "run_delay(schedstat_fd) -> the calling thread's run-queue wait (ns), -1 unread; the file is read again only when "
     "the thread left its CPU since its last read (getrusage's context switches)"},
    {"thread_id", py_thread_id, METH_NOARGS,
     "The calling thread's OS id, as threading.get_native_id(): a gettid system call once per thread (again after a fork)."},
    {"next_id", py_next_id, METH_NOARGS, "A new span id (unique in the process, never 0)."},
    {"parent_of", py_parent_of, METH_O, "parent_of(current_span value) -> the parent id of a span opened now, or None"},
    {"top_name", py_top_name, METH_NOARGS, "The name of this thread's innermost open native span, or None."},
    {"take", py_take, METH_NOARGS, "The finished calls as span tuples (spans.buffer.SPAN_FIELDS), oldest first."},
    {"take_block", py_take_block, METH_VARARGS,
     "take_block(dumps, max_spans) -> (body, n, first span id): the oldest finished calls as a span block "
     "(core/spanformat.py's layout; dumps: the header's JSON writer), or None (none, or a big-endian machine)"},
    {"pending", py_pending, METH_NOARGS, "How many finished calls wait."},
    {"park", py_park, METH_VARARGS,
     "park(lock, timeout_s, poll_s, finished, limit, fd=-1) -> 0 timed out, 1 woken (lock acquired and released), 2 timed "
     "out after waiting out a foreign profiler or tracer, 3 waited spans reached limit while one is active; lock may be a signal number, blocked in this thread: 1 when "
     "it came, or when the optional fd became readable (Linux)"},
    {"thread_hooked", py_thread_hooked, METH_O,
     "thread_hooked(ident) -> bool: the thread has its own setprofile/settrace function (False: no such thread)"},
    {"read_held", py_read_held, METH_VARARGS,
     "read_held(fd, n, offset=-1) -> bytes: read or pread with the GIL kept (a few bytes that never block)"},
    {"dropped", py_dropped, METH_NOARGS, "How many finished calls were dropped (the columns full)."},
    {"clear", py_clear, METH_NOARGS, "Drop the finished calls and this thread's open ones."},
    {"open_spans", py_open_spans, METH_O, "open_spans(thread ident) -> [(span id, parent id, name, op, start ns)]"},
    {"call_wake", py_call_wake, METH_O, "call_wake(timer_id) -> calls that woke a rest so far; -1: no wake on a call"},
#ifdef STEPSCOPE_STACKWALK
    {"own_signal", own_signal, METH_O,
     "own_signal(signum): the busy threads' own CPU-clock timers signal signum (its handler installed; ownclock.c); "
     "0: uninstalled (SIG_IGN, then SIG_DFL)"},
#endif
    {"last_call_wake", py_last_call_wake, METH_NOARGS,
     "last_call_wake() -> (t_ns, thread id) of the last span that woke a rest (call_wake), or None"},
    {"open_calls", py_open_calls, METH_NOARGS, "open_calls() -> how many native calls are open now, every thread's"},
    {"mon_start", (PyCFunction)(void (*)(void))mon_start, METH_FASTCALL, "sys.monitoring PY_START callback"},
    {"mon_resume", (PyCFunction)(void (*)(void))mon_resume, METH_FASTCALL, "sys.monitoring PY_RESUME callback"},
    {"mon_return", (PyCFunction)(void (*)(void))mon_return, METH_FASTCALL, "sys.monitoring PY_RETURN callback"},
    {"mon_yield", (PyCFunction)(void (*)(void))mon_yield, METH_FASTCALL, "sys.monitoring PY_YIELD callback"},
    {"mon_throw", (PyCFunction)(void (*)(void))mon_throw, METH_FASTCALL, "sys.monitoring PY_THROW callback"},
    {"mon_unwind", (PyCFunction)(void (*)(void))mon_unwind, METH_FASTCALL, "sys.monitoring PY_UNWIND callback"},
    {NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "stepscope.record.native._native",
                                       "The tracer's hot path in C (see stepscope/record/native).", -1, methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    if (recorder_init() < 0 || PyType_Ready(&ProbeType) < 0 || PyType_Ready(&DenoiserProbeType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Probe", (PyObject *)&ProbeType) < 0) return NULL;
    if (PyModule_AddObjectRef(m, "DenoiserProbe", (PyObject *)&DenoiserProbeType) < 0) return NULL;
#ifdef STEPSCOPE_STACKWALK
    if (looks_init() < 0 || PyType_Ready(&WalkerType) < 0 ||
        PyModule_AddObjectRef(m, "Walker", (PyObject *)&WalkerType) < 0)
        return NULL;
#endif
    if (sigtick_init(m) < 0) return NULL;
    if (PyModule_AddObjectRef(m, "parked", parked) < 0) return NULL;
    if (PyModule_AddObjectRef(m, "parked_gen", parked_gen) < 0) return NULL;
    if (PyModule_AddObjectRef(m, "orphans", orphans) < 0) return NULL;
    static const struct { const char *name; long long value; } layout[] = {LAYOUT_INTS}; /* layout.h: REC_*, SSB_* */
    for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++) {
        PyObject *v = PyLong_FromLongLong(layout[i].value);
        int r = v == NULL ? -1 : PyModule_AddObjectRef(m, layout[i].name, v);
        Py_XDECREF(v);
        if (r < 0) return NULL;
    }
    static const struct { const char *name; const char *value; } layout_bytes[] = {LAYOUT_BYTES};
    for (size_t i = 0; i < sizeof layout_bytes / sizeof layout_bytes[0]; i++) {
        PyObject *v = PyBytes_FromString(layout_bytes[i].value);
        int r = v == NULL ? -1 : PyModule_AddObjectRef(m, layout_bytes[i].name, v);
        Py_XDECREF(v);
        if (r < 0) return NULL;
    }
    return m;
}
