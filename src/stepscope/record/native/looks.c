/* stepscope.record.native._native: the recorder thread's steady state in C (Walker.run; issue 41).

   Between two looks at the other threads the recorder thread waits without the GIL; each look takes it. A busy
   thread that runs Python waits for the GIL while the recorder holds it, so what the recorder does with the GIL
   between two waits is paid by the program: its Python loop (session.Session._record_loop: the budget, the checks,
   the look, the memory lane, the next time), 80-150 us of CPU a look on a cache cooled by the wait, made a busy
   worker wait about 170 us a look (benchmarks/thread_stall.py). Here a run of looks is one C call: it waits until
   each look is due (the lock, as park waits on it), takes the GIL for the look (walker_sample: the walk and each
   thread's accounting, threads.c) and the memory lane's RSS reading (a pread of /proc/self/statm kept open,
   appended to the lane as MemoryLane.sample does with no CUDA figures), and returns to Python as soon as anything
   else is due:

     0  until_ns reached (the Python loop's timed duties: a flush, the budget's window, its 100 ms checks, a CUDA
        reading of the memory lane)
     1  woken (the lock acquired and released again: the session's finish, a fork)
     2  a look at which no thread had run (the loop's quiet rule)
     3  the main thread ran (a resting main thread: its wake)
     4  threads came or went (len(threading._active) changed)
     5  a stop signal came: the bytes read from the stop signals' pipe (endsignals.StopWatch, which the signals'
        C handler writes every handled signal's number to) are returned, to be passed on; bytes of other signals (the
        main thread's sampling ticks) are read and dropped, as StopWatch.check drops them
     6  finished spans wait to be written (limit)
     7  a profiler or tracer of the program's is active (park's rule: the loop waits it out)

   The budget's look time (the thread's CPU clock around each look) is returned, to be added to the window's. */

#include "threads.h"

#ifdef STEPSCOPE_STACKWALK

#include "sigtick.h"

#include <time.h>
#include <unistd.h>

extern Py_ssize_t n_fin; /* the C recorder's finished calls waiting (recorder.h) */

static inline int64_t mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int64_t own_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyObject *s_release, *s_last_t, *s_last, *s_count, *s_append;

/* the memory lane's RSS reading at t (MemoryLane.sample without CUDA figures); 0, or -1 with an exception set */
static int read_rss(PyObject *mem, PyObject *pending, int fd, long long page, int64_t t) {
    char buf[96];
    long long rss = -1;
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    if (got > 0) { /* "size resident shared ...": the second field, in pages */
        buf[got] = 0;
        char *p = strchr(buf, ' ');
        if (p != NULL) rss = strtoll(p + 1, NULL, 10) * page;
    }
    PyObject *row = Py_BuildValue("(LLii)", (long long)t, rss, -1, -1);
    if (row == NULL) return -1;
    PyObject *r = PyObject_CallMethodOneArg(pending, s_append, row);
    int rc = r == NULL ? -1 : 0;
    Py_XDECREF(r);
    PyObject *tt = rc == 0 ? PyLong_FromLongLong(t) : NULL;
    if (rc == 0 && (tt == NULL || PyObject_SetAttr(mem, s_last, row) < 0 || PyObject_SetAttr(mem, s_last_t, tt) < 0))
        rc = -1;
    Py_XDECREF(tt);
    Py_DECREF(row);
    if (rc == 0) {
        PyObject *c = PyObject_GetAttr(mem, s_count);
        PyObject *one = PyLong_FromLong(1);
        PyObject *c1 = c == NULL || one == NULL ? NULL : PyNumber_Add(c, one);
        Py_XDECREF(one);
        rc = c1 == NULL || PyObject_SetAttr(mem, s_count, c1) < 0 ? -1 : 0;
        Py_XDECREF(c);
        Py_XDECREF(c1);
    }
    return rc;
}

/* run(lock, sample_lock, skip, period_ns, cap_ns, next_t, until_ns, main_ident, active, stop_fd, stop_sigs, finished, limit, mem,
       rss_fd, page, mem_every) -> (reason, looks, n, next_t, seen, ran, look_cpu_ns, stop_bytes): see the top. skip: thread ids not
   looked at (Sampler.sample's); main_ident: the thread whose running ends the run (0: none); active:
   threading._active, whose size is watched; stop_fd: the pipe (-1: none), stop_sigs: the stop signals' numbers (bytes);
   stop_bytes: what was read from the pipe when a stop signal was among it (reason 5), else b""; finished: the Python recorder's finished
   spans (a deque); mem: the MemoryLane, or None; it is read when mem.last_t is mem_every ns old or more. seen, ran:
   the last look's (Sampler.last_threads, ran), None when no look was made; sample_lock: Sampler.lock, taken for
   each look as Sampler.sample takes it (a look that finds it held, by a take_back running in the main thread, is
   skipped); n: threads looked at, all looks. */
PyObject *walker_run(Walker *w, PyObject *args) {
    PyObject *lock, *slock, *skip, *active, *finished, *mem, *stop_sigs;
    long long period, cap, next_t, until, main_ident, limit, page, mem_every;
    int stop_fd, rss_fd;
    if (!PyArg_ParseTuple(args, "OOOLLLLLO!iSOLOiLL:run", &lock, &slock, &skip, &period, &cap, &next_t, &until, &main_ident,
                          &PyDict_Type, &active, &stop_fd, &stop_sigs, &finished, &limit, &mem, &rss_fd, &page,
                          &mem_every))
        return NULL;
    if (period <= 0) {
        PyErr_SetString(PyExc_ValueError, "run: period_ns > 0");
        return NULL;
    }
    PyObject *pending = NULL, *seen = NULL, *ran = NULL, *sargs = NULL;
    if (mem != Py_None && rss_fd >= 0 && (pending = PyObject_GetAttrString(mem, "pending")) == NULL) return NULL;
    sargs = Py_BuildValue("(OLL)", skip, period, cap);
    if (sargs == NULL) goto fail;
    Py_ssize_t n_active = PyDict_GET_SIZE(active);
    long long looks = 0, look_cpu = 0, n = 0;
    int reason;
    char stop_buf[256];
    ssize_t stop_n = 0;
    for (;;) {
        int64_t now = mono();
        if (now >= until) { reason = 0; break; }
        int64_t due = next_t < until ? next_t : until;
        if (due > now) {
            PyObject *r = PyObject_CallMethod(lock, "acquire", "id", 1, (double)(due - now) / 1e9);
            if (r == NULL) goto fail;
            int got = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (got < 0) goto fail;
            if (got) {
                r = PyObject_CallMethodNoArgs(lock, s_release);
                if (r == NULL) goto fail;
                Py_DECREF(r);
                reason = 1;
                break;
            }
        }
        int f = foreign_tool();
        if (f < 0) goto fail;
        if (f) { reason = 7; break; }
        int64_t t = mono();
        if (t >= until) { reason = 0; break; }
        if (t < next_t) continue;
        PyObject *held = PyObject_CallMethod(slock, "acquire", "i", 0); /* (Sampler.lock: a take_back in progress) */
        if (held == NULL) goto fail;
        int got_lock = PyObject_IsTrue(held);
        Py_DECREF(held);
        if (got_lock <= 0) { /* busy: the next look charges the time since this thread's previous one */
            if (got_lock < 0) goto fail;
            next_t += period;
            continue;
        }
        int64_t c0 = own_cpu();
        PyObject *res = walker_sample(w, sargs);
        held = PyObject_CallMethodNoArgs(slock, s_release);
        if (held == NULL) { Py_XDECREF(res); goto fail; }
        Py_DECREF(held);
        if (res == NULL) goto fail;
        Py_XSETREF(seen, Py_NewRef(PyTuple_GET_ITEM(res, 0)));
        Py_XSETREF(ran, Py_NewRef(PyTuple_GET_ITEM(res, 1)));
        n += PyLong_AsLongLong(PyTuple_GET_ITEM(res, 2));
        Py_DECREF(res);
        looks++;
        if (pending != NULL) {
            PyObject *lt = PyObject_GetAttr(mem, s_last_t);
            long long last = lt == NULL ? -1 : PyLong_AsLongLong(lt);
            Py_XDECREF(lt);
            if (last == -1 && PyErr_Occurred()) goto fail;
            if (t - last >= mem_every && read_rss(mem, pending, rss_fd, page, t) < 0) goto fail;
        }
        look_cpu += own_cpu() - c0;
        next_t += period;
        if (next_t < t) next_t = t + period; /* fell behind (the GIL held elsewhere): skip, don't burst */
        Py_ssize_t nran = PyList_GET_SIZE(ran);
        if (nran == 0) { reason = 2; break; }
        int main_ran = 0;
        for (Py_ssize_t i = 0; i < nran && main_ident; i++)
            main_ran |= PyLong_AsUnsignedLong(PyList_GET_ITEM(ran, i)) == (unsigned long)main_ident;
        if (main_ran) { reason = 3; break; }
        if (PyDict_GET_SIZE(active) != n_active) { reason = 4; break; }
        if (stop_fd >= 0) {
            ssize_t got = read(stop_fd, stop_buf, sizeof stop_buf);
            int stop = 0;
            for (ssize_t i = 0; i < got && !stop; i++)
                stop = memchr(PyBytes_AS_STRING(stop_sigs), (unsigned char)stop_buf[i], PyBytes_GET_SIZE(stop_sigs)) != NULL;
            if (stop) { stop_n = got; reason = 5; break; }
        }
        Py_ssize_t waiting = PyObject_Size(finished);
        if (waiting < 0) goto fail;
        if (waiting + n_fin >= limit) { reason = 6; break; }
    }
    Py_DECREF(sargs);
    Py_XDECREF(pending);
    PyObject *out = Py_BuildValue("(iLLLOOLy#)", reason, looks, n, next_t, seen ? seen : Py_None,
                                  ran ? ran : Py_None, look_cpu, stop_buf, (Py_ssize_t)stop_n);
    Py_XDECREF(seen);
    Py_XDECREF(ran);
    return out;
fail:
    Py_XDECREF(sargs);
    Py_XDECREF(pending);
    Py_XDECREF(seen);
    Py_XDECREF(ran);
    return NULL;
}

int looks_init(void) {
    s_release = PyUnicode_InternFromString("release");
    s_last_t = PyUnicode_InternFromString("last_t");
    s_last = PyUnicode_InternFromString("last");
    s_count = PyUnicode_InternFromString("count");
    s_append = PyUnicode_InternFromString("append");
    return s_release && s_last_t && s_last && s_count && s_append ? 0 : -1;
}

#endif /* STEPSCOPE_STACKWALK */
