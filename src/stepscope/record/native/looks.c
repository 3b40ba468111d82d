/* stepscope.record.native._native: the recorder thread's steady state in C (Walker.run; issue 41).

   Between two looks at the other threads the recorder thread waits without the GIL; each look takes it. A busy
   thread that runs Python waits for the GIL while the recorder holds it, so what the recorder does with the GIL
   between two waits is paid by the program: its Python loop (session.Session._record_loop: the budget, the checks,
   the look, the memory lane, the next time), 80-150 us of CPU a look on a cache cooled by the wait, made a busy
   worker wait about 170 us a look (benchmarks/thread_stall.py). Here a run of looks is one C call: it waits until
   each look is due without the GIL (ppoll on an eventfd that Walker.notify writes: the session's finish and a fork
   call it with their release of the session's lock, which is also checked at each look), reads what needs no GIL
   while still without it (the known threads' CPU clocks, /proc/self/statm when the memory lane will be due: system
   calls, slow on a cache cooled by the wait), then takes the GIL for the look (walker_sample: the walk and each
   thread's accounting, threads.c, with those CPU clocks) and the lane's row (appended as MemoryLane.sample does,
   with no CUDA figures), and returns to Python as soon as anything else is due:

     0  until_ns reached (the Python loop's timed duties: a flush, the budget's window, its 100 ms checks, a CUDA
        reading of the memory lane)
     1  woken (the lock acquired and released again: the session's finish, a fork)
     2  looks in a row at which no thread had run or moved, covering quiet_ns (the loop's quiet rule: it slows then)
     3  the main thread ran (a resting main thread: its wake)
     4  threads came or went (len(threading._active) changed)
     5  a stop signal came: the bytes read from the stop signals' pipe (endsignals.StopWatch, which the signals'
        C handler writes every handled signal's number to) are returned, to be passed on; bytes of other signals (the
        main thread's sampling ticks) are read and dropped, as StopWatch.check drops them
     6  finished spans wait to be written (limit)
     7  a profiler or tracer of the program's is active (park's rule: the loop waits it out)
     8  the main thread's state changed (its own timers' sampling began or ended: a rest or a wake): who samples it
        is decided again. Read at each look with the GIL held, as the handler that changes it holds it, so no look
        reads the main thread while its own timers sample it too, and none skips it while they do not.

   The budget's look time is returned, to be added to the window's: the thread's CPU time in the whole call, the
   wake-up of each wait included (~45 us a look on a 2-core VM, more than the look itself). */

#include "looks.h"
#include "ownclock.h"
#include "remote.h"
#include "threads.h"

#ifdef STEPSCOPE_STACKWALK

#include "sigtick.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

extern Py_ssize_t n_fin; /* the C recorder's finished calls waiting (recorder.h) */


static PyObject *s_release, *s_last_t, *s_last, *s_count, *s_append, *s_active, *s_resting;

/* who samples the main thread, from its timer sampler's state (None: no timer sampler): 0 its own timers (active,
   not resting), 1 the recorder (not active), 2 the recorder while it rests; -1 with an exception set */
static int main_state_here(PyObject *st) {
    if (st == Py_None) return 1;
    PyObject *a = PyObject_GetAttr(st, s_active);
    int active = a == NULL ? -1 : PyObject_IsTrue(a);
    Py_XDECREF(a);
    if (active < 0) return -1;
    if (!active) return 1;
    PyObject *r = PyObject_GetAttr(st, s_resting);
    int resting = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    return resting < 0 ? -1 : resting ? 2 : 0;
}

/* the RSS (bytes) in /proc/self/statm's first got bytes in buf (96 bytes; got < 0: read fd now), or -1: "size resident
   shared ...", the second field, in pages. Needs no GIL. */
static long long parse_rss(int fd, long long page, char *buf, ssize_t got) {
    if (got < 0) got = pread(fd, buf, 95, 0);
    if (got <= 0) return -1;
    buf[got] = 0;
    char *p = strchr(buf, ' ');
    return p == NULL ? -1 : strtoll(p + 1, NULL, 10) * page;
}

/* the memory lane's row (t, rss, -1, -1) appended as MemoryLane.sample does without CUDA figures: pending, last,
   last_t, count; 0, or -1 with an exception set */
static int append_rss(PyObject *mem, PyObject *pending, int64_t t, long long rss) {
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

static int read_rss(PyObject *mem, PyObject *pending, int fd, long long page, int64_t t, char *buf, ssize_t got) {
    return append_rss(mem, pending, t, parse_rss(fd, page, buf, got));
}

/* whether the stop signals' pipe's got bytes in buf hold one of the stop signals (a bytes object's) */
static int has_stop(const char *buf, ssize_t got, PyObject *stop_sigs) {
    const char *sigs = PyBytes_AS_STRING(stop_sigs);
    for (ssize_t i = 0; i < got; i++)
        if (memchr(sigs, (unsigned char)buf[i], (size_t)PyBytes_GET_SIZE(stop_sigs)) != NULL) return 1;
    return 0;
}

/* the wake eventfd of the walker (made at the first call), or -1 with an exception set */
static int wake_fd(Walker *w) {
    if (w->wake_fd1 == 0) {
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd < 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
        w->wake_fd1 = fd + 1;
    }
    return w->wake_fd1 - 1;
}

#define REMOTE_SPIN_NS 200000LL  /* how long a look without the GIL waits for a busy thread to release it (remote.c) */
#define REMOTE_HOLD_NS 250000000LL /* looks without the GIL at most this long after the last hold of it */

/* A look without the GIL (remote.c): every thread whose CPU clock moved since the last look (ref_cpu; the same
   threads as then) read where it runs, its sample left pending for the next hold of the GIL. 1: done (*used: the CPU
   time those threads used since); 0: a look with the GIL is needed (a thread came or went, the resting main thread
   ran, a thread could not be read: its samples of this look dropped). */
static int look_remote(Walker *w, Py_ssize_t np, const unsigned long *natives, const unsigned long *ref_native,
                       const int64_t *cpus, const int64_t *ref_cpu, const uintptr_t *tss, const unsigned long *tids,
                       unsigned long main_ident, int64_t *used, const char *cov) {
    for (Py_ssize_t k = 0; k < np; k++)
        if (natives[k] != ref_native[k] || cpus[k] < 0) return 0;
    Py_ssize_t mark = remote_pending(w);
    int64_t u = 0;
    for (Py_ssize_t k = 0; k < np; k++) {
        if (cpus[k] == ref_cpu[k]) continue;
        if (cov[k]) { /* (sampled by its own timer: ownclock.c) */
            u += cpus[k] - ref_cpu[k];
            continue;
        }
        if (tids[k] == main_ident || !remote_sample(w, tss[k], tids[k], cpus[k], REMOTE_SPIN_NS)) {
            if (tids[k] != main_ident) w->remote_misses++;
            remote_drop(w, mark);
            return 0;
        }
        u += cpus[k] - ref_cpu[k];
    }
    *used = u;
    w->remote_looks++;
    return 1;
}

/* run(lock, sample_lock, skip, period_ns, cap_ns, next_t, until_ns, main_ident, main_state, active, stop_fd,
       stop_sigs, finished, limit, mem, rss_fd, page, mem_every, quiet, quiet_ns)
   -> (reason, looks, n, next_t, seen, ran, look_cpu_ns, stop_bytes, quiet): see the top. quiet: the time (ns)
   covered by the looks in a row at which no thread had run or moved, so far, each counting period_ns (returned as
   it ends: 0 after a look where one ran); the run ends once it reaches quiet_ns.
   lock: the session's wake lock (held while recording: acquired here means released, reason 1); sample_lock:
   Sampler.lock, taken for each look as Sampler.sample takes it (a look that finds it held, by a take_back running in
   the main thread, is skipped); skip: thread ids not looked at (Sampler.sample's); main_ident: the main thread;
   main_state: its timer sampler's state (signals.MainThreadSampler.st: `active`, `resting`), or None: while its own
   timers sample it (active and not resting) it is not looked at here; while it rests, its running ends the run
   (reason 3); a change of either ends it (reason 8); active: threading._active, whose size is watched; stop_fd: the
   pipe (-1: none), stop_sigs: the stop signals' numbers (bytes); finished: the Python recorder's finished spans (a
   deque); mem: the MemoryLane, or None, read when mem.last_t is mem_every ns old or more (rss_fd: its statm, page:
   bytes a page). seen, ran: the last look's (Sampler.last_threads, ran), None when no look was made; n: threads
   looked at, all looks; stop_bytes: what was read from the pipe when a stop signal was among it (reason 5), else
   b"". */
PyObject *walker_run(PyObject *walker, PyObject *args) {
    Walker *w = (Walker *)walker;
    PyObject *lock, *slock, *skip, *mstate, *active, *finished, *mem, *stop_sigs;
    long long period, cap, next_t, until, limit, page, mem_every, quiet, quiet_ns;
    unsigned long main_ident;
    int stop_fd, rss_fd;
    if (!PyArg_ParseTuple(args, "OOOLLLLkOO!iSOLOiLLLL:run", &lock, &slock, &skip, &period, &cap, &next_t, &until,
                          &main_ident, &mstate, &PyDict_Type, &active, &stop_fd, &stop_sigs, &finished, &limit, &mem,
                          &rss_fd, &page, &mem_every, &quiet, &quiet_ns))
        return NULL;
    if (period <= 0) {
        PyErr_SetString(PyExc_ValueError, "run: period_ns > 0");
        return NULL;
    }
    PyObject *pending = NULL, *seen = NULL, *ran = NULL, *sargs = NULL, *sargs_slow = NULL, *skips = NULL;
    int main_here = main_state_here(mstate); /* (1: looked at here; 2: here, resting) */
    if (main_here < 0) return NULL;
    if (mem != Py_None && rss_fd >= 0 && (pending = PyObject_GetAttrString(mem, "pending")) == NULL) return NULL;
    skips = PySet_New(skip);
    if (skips == NULL) goto fail;
    if (!main_here) { /* sampled by its own timers */
        PyObject *m = PyLong_FromUnsignedLong(main_ident);
        int rc = m == NULL ? -1 : PySet_Add(skips, m);
        Py_XDECREF(m);
        if (rc < 0) goto fail;
    }
    /* (after looks OWN_SLOW periods apart, ownclock.c, a thread's sample is charged up to OWN_SLOW + 1 of them) */
    long long cap_slow = cap > (OWN_SLOW + 1) * period ? cap : (OWN_SLOW + 1) * period;
    sargs = Py_BuildValue("(OLL)", skips, period, cap);
    if (sargs == NULL || (sargs_slow = Py_BuildValue("(OLL)", skips, period, cap_slow)) == NULL) goto fail;
    Py_ssize_t n_active = PyDict_GET_SIZE(active);
    long long looks = 0, look_cpu = 0, n = 0;
    int64_t run_c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID); /* (the budget's: this call's CPU, its wake-ups included, */
    long long own_ns0 = w->own_ns;                      /* and the threads' own timers' handlers': ownclock.c) */
    __atomic_store_n(&w->quiet_looks, 0, __ATOMIC_RELAXED);
    int reason;
    char stop_buf[256];
    ssize_t stop_n = 0;
    int efd = wake_fd(w);
    if (efd < 0) goto fail;
    unsigned long natives[64], ref_native[64];
    int64_t cpus[64], ref_cpu[64], ref_t = 0, last_tq = 0; /* (ref_t: when ref_cpu was read) */
    Py_ssize_t ref_n = -1; /* the last full look's threads and CPU clocks (-1: none yet in this run) */
    long long quiet_looks = 0; /* looks made without the GIL (a quiet look: see below) */
    int last_quiet = 0;        /* the last look was one */
    int64_t q_t[128];          /* the memory lane's readings made at quiet looks (no GIL), appended after them */
    long long q_rss[128];
    int nq = 0;
    Py_ssize_t ended = PyObject_Size(finished); /* finished spans waiting at the last full look (+ the C recorder's) */
    if (ended < 0) goto fail;
    ended += n_fin;
    char rss_buf[96];
    long long mem_last = -1; /* mem.last_t at the previous look (-1: not read yet) */
    uintptr_t tss[64];           /* the known threads' thread states and ids (looks without the GIL: remote.c) */
    unsigned long tids[64];
    /* (finished's length is read without the GIL: a deque's) */
    int remote_ok = w->remote_on && strcmp(Py_TYPE(finished)->tp_name, "collections.deque") == 0;
    int remote_missed = 0;       /* looks in a row that could not read a thread without the GIL: 2 end them here */
    int64_t held_t = clock_ns(CLOCK_MONOTONIC); /* the last look with the GIL */
    char cov[64];   /* the threads this look leaves to their own timers (ownclock.c) */
    int slowed = 0; /* a look since the last hold of the GIL came OWN_SLOW periods after the one before */
    for (;;) {
        PyObject *r = PyObject_CallMethod(lock, "acquire", "i", 0); /* (released: the session's finish, a fork) */
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
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        if (now >= until) { reason = 0; break; }
        int64_t due = next_t < until ? next_t : until;
        /* what the look will read that needs no GIL, read before it is taken: the known threads' CPU clocks, and the
           RSS when the memory lane will be due (the copy of the thread table: it changes only with the GIL held) */
        Py_ssize_t np = 0;
        for (Py_ssize_t i = 0; i < w->n_threads && np < 64; i++)
            if (w->threads[i].native != 0) {
                tss[np] = w->threads[i].ts;
                tids[np] = w->threads[i].tid;
                natives[np++] = w->threads[i].native;
            }
        Py_ssize_t n_recs = w->n_threads; /* (the table changes only with the GIL held: the main thread's rest, wake) */
        if (remote_ok && remote_sync(w) < 0) goto fail;
        /* Quiet looks without the GIL: while the recorder looks at every thread (the main one too: main_here), a look
           at which no thread's CPU clock moved since the last full look (the same threads, every one read) would find
           every thread blocked at its stack, record it there again and end nothing but by the quiet rule: it is
           counted here without the GIL, the samples or the lock (each thread's next row is charged the time since its
           previous one); the memory lane, when due, is read here too and its rows appended at the next hold of the
           GIL (its readings stay at their times: explain compares the RSS at a repeat's start). A thread that moved, came or
           went (its starter ran), a stop signal (its handler ran), the main thread's rest or wake (its handler ran),
           notify (the eventfd) all end them at once. An idle 12-thread server's look took ~110 us of CPU with the
           GIL, ~40 us without (the wait's wake-up and the clocks). */
        int quiet_ok = main_here != 0 && ref_n == np && np > 0 && w->n_threads <= 64;
        for (Py_ssize_t i = 0; quiet_ok && i < np; i++) quiet_ok = natives[i] == ref_native[i];
        int want_rss = pending != NULL && (mem_last < 0 || due - mem_last >= mem_every);
        ssize_t rss_got = -1;
        int woken = 0, waited = due > now, quiet_end = 0;
        int64_t still_t = 0;
        Py_BEGIN_ALLOW_THREADS
        for (;;) {
            if (waited) {
                struct timespec left = {(time_t)((due - now) / 1000000000LL), (long)((due - now) % 1000000000LL)};
                struct pollfd p = {efd, POLLIN, 0};
                if (ppoll(&p, 1, &left, NULL) > 0 && (p.revents & POLLIN)) {
                    uint64_t v;
                    woken = read(efd, &v, sizeof v) == (ssize_t)sizeof v;
                }
            }
            if (woken) break;
            int same = quiet_ok;
            for (Py_ssize_t i = 0; i < np; i++) {
                cpus[i] = thread_cpu(natives[i]);
                same &= cpus[i] >= 0 && cpus[i] == ref_cpu[i];
            }
            int64_t tq = last_tq = clock_ns(CLOCK_MONOTONIC), used = 0;
            /* (each thread that runs all the time left to its own timer: ownclock.c; slow: every other one still) */
            int slow = tq >= next_t && tq < until && ref_n == np && np > 0;
            w->n_own_skip = 0;
            for (Py_ssize_t i = 0; i < np; i++) {
                int ran = ref_n == np && ref_t > 0 && natives[i] == ref_native[i] && /* (half the time since) */
                          (cpus[i] - ref_cpu[i]) * 2 >= tq - ref_t;
                cov[i] = tq >= next_t && tq < until && tids[i] != main_ident &&
                         own_decide(w, tids[i], natives[i], tss[i], tq, cpus[i], period, ran);
                if (cov[i]) w->own_skip[w->n_own_skip++] = natives[i];
                else if (cpus[i] != ref_cpu[i] || natives[i] != ref_native[i]) slow = 0;
            }
            slow &= w->n_own_skip > 0;
            int remote = 0; /* a look without the GIL: 1 threads ran, 2 they ran within the idle share (quiet) */
            /* (the sizes below are read without the GIL, as hints: threads that came or went, the main thread's rest
               or wake, spans waiting to be written all end these looks; the next look takes the GIL) */
            Py_ssize_t waiting = remote_ok ? Py_SIZE(finished) + n_fin : 0; /* (a deque's length: remote_ok) */
            if (!same && remote_ok && remote_missed < 2 && ref_n == np && np > 0 && tq < until && tq >= next_t &&
                tq - held_t < REMOTE_HOLD_NS && w->n_threads == n_recs && PyDict_GET_SIZE(active) == n_active &&
                waiting < limit) { /* the threads that moved read without the GIL (remote.c) */
                if (look_remote(w, np, natives, ref_native, cpus, ref_cpu, tss, tids, main_ident, &used, cov)) {
                    remote_missed = 0;
                    for (Py_ssize_t i = 0; i < np; i++) ref_cpu[i] = cpus[i];
                    ref_t = tq;
                    remote = walker_idle_spend(w, tq, waiting != ended ? -1 : used) ? 2 : 1;
                    ended = waiting;
                    if (remote == 1) quiet = 0;
                    ssize_t got = stop_fd >= 0 ? read(stop_fd, stop_buf, sizeof stop_buf) : 0;
                    if (got > 0 && has_stop(stop_buf, got, stop_sigs)) stop_n = got; /* (reason 5, with the GIL) */
                } else {
                    remote_missed++;
                }
            }
            if (!remote && (!same || tq >= until || tq < next_t)) { /* a full look (or nothing due yet): the GIL */
                if (want_rss) rss_got = pread(rss_fd, rss_buf, sizeof rss_buf - 1, 0);
                break;
            }
            if (pending != NULL && (mem_last < 0 || tq - mem_last >= mem_every)) { /* the lane, due: read it */
                if (nq == 128) { /* (kept for the next hold of the GIL: full, a full look appends them) */
                    if (want_rss) rss_got = pread(rss_fd, rss_buf, sizeof rss_buf - 1, 0);
                    break;
                }
                q_t[nq] = tq;
                q_rss[nq++] = parse_rss(rss_fd, page, rss_buf, -1);
                mem_last = tq;
                want_rss = 0;
            }
            if (!remote) __atomic_store_n(&w->quiet_looks, ++quiet_looks, __ATOMIC_RELAXED); /* (readable meanwhile) */
            last_quiet = 1;
            still_t = tq;
            next_t += slow ? OWN_SLOW * period : period;
            slowed |= slow;
            if (next_t < tq) next_t = tq + period; /* (as a full look: skip, don't burst) */
            if (remote != 1 && (quiet += period) >= quiet_ns) { quiet_end = 1; break; }
            if (stop_n > 0) break;
            now = tq;
            due = next_t < until ? next_t : until;
            waited = due > now;
        }
        Py_END_ALLOW_THREADS
        held_t = clock_ns(CLOCK_MONOTONIC);
        if (remote_replay(w, period, slowed ? cap_slow : cap) < 0) goto fail; /* (the looks without the GIL: their rows first) */
        if (still_t) /* (each thread read was still at its stack then: one that ends before the next look is charged so far) */
            for (Py_ssize_t i = 0; i < w->n_threads; i++)
                for (Py_ssize_t k = 0; k < np; k++)
                    if (w->threads[i].native != 0 && w->threads[i].native == natives[k]) {
                        w->threads[i].still_t = still_t;
                        break;
                    }
        for (int i = 0; i < nq; i++) /* (the lane's readings of the quiet looks, in time order) */
            if (append_rss(mem, pending, q_t[i], q_rss[i]) < 0) goto fail;
        nq = 0;
        if (stop_n > 0) { reason = 5; break; } /* (a stop signal's bytes, read at a look without the GIL) */
        if (woken) { reason = 1; break; }
        if (quiet_end) { reason = 2; break; }
        int f = foreign_tool();
        if (f < 0) goto fail;
        if (f) { reason = 7; break; }
        int64_t t = clock_ns(CLOCK_MONOTONIC);
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
        int here = main_state_here(mstate); /* (read with the GIL held, as the look: nothing changes it between) */
        if (here != main_here) {
            held = PyObject_CallMethodNoArgs(slock, s_release);
            if (held == NULL || here < 0) { Py_XDECREF(held); goto fail; }
            Py_DECREF(held);
            reason = 8;
            break;
        }
        Py_ssize_t waiting = PyObject_Size(finished);
        if (waiting < 0) { PyObject *x = PyObject_CallMethodNoArgs(slock, s_release); Py_XDECREF(x); goto fail; }
        int spans = waiting + n_fin != ended; /* (traced calls ended since the last look: the program works) */
        ended = waiting + n_fin;
        w->busy = spans;
        w->pre_native = natives;
        w->pre_cpu = cpus;
        w->n_pre = np;
        PyObject *res = walker_sample(w, slowed ? sargs_slow : sargs);
        w->n_pre = 0;
        int slow_next = w->n_own_skip > 0 && ref_n == np; /* (every thread that moved left to its own timer) */
        for (Py_ssize_t i = 0; slow_next && i < np; i++)
            slow_next = own_skipped(w, natives[i]) || (natives[i] == ref_native[i] && cpus[i] == ref_cpu[i]);
        int covered = w->n_own_skip > 0; /* (threads that ran, left to their own timers: never quiet) */
        w->n_own_skip = 0;
        slowed = 0;
        last_quiet = 0;
        for (Py_ssize_t i = 0; i < np; i++) { /* (the reference of the quiet looks that follow) */
            ref_native[i] = natives[i];
            ref_cpu[i] = cpus[i];
        }
        ref_n = np;
        ref_t = last_tq;
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
            mem_last = last;
            if (t - last >= mem_every) {
                if (read_rss(mem, pending, rss_fd, page, t, rss_buf, rss_got) < 0) goto fail;
                mem_last = t;
            }
        }
        next_t += slow_next ? OWN_SLOW * period : period;
        slowed = slow_next;
        if (next_t < t) next_t = t + period; /* fell behind (the GIL held elsewhere): skip, don't burst */
        Py_ssize_t nran = PyList_GET_SIZE(ran);
        /* (threads that moved or ran using no more than the idle share of a CPU while no traced call ended,
           walker_idle_spend: still quiet) */
        if (walker_idle_spend(w, t, covered ? -1 : nran == 0 && w->moved == 0 ? 0 : spans ? -1 : w->used)) {
            if ((quiet += period) >= quiet_ns) { reason = 2; break; }
        } else {
            quiet = 0;
        }
        int main_ran = 0;
        for (Py_ssize_t i = 0; i < nran && main_here == 2; i++)
            main_ran |= PyLong_AsUnsignedLong(PyList_GET_ITEM(ran, i)) == main_ident;
        if (main_ran) { reason = 3; break; }
        if (PyDict_GET_SIZE(active) != n_active) { reason = 4; break; }
        if (stop_fd >= 0) {
            ssize_t got = read(stop_fd, stop_buf, sizeof stop_buf);
            if (has_stop(stop_buf, got, stop_sigs)) { stop_n = got; reason = 5; break; }
        }
        if (waiting + n_fin >= limit) { reason = 6; break; }
    }
    looks += quiet_looks;
    look_cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - run_c0 + (w->own_ns - own_ns0);
    if (last_quiet && ran != NULL) { /* (the last look's: none ran) */
        PyObject *none_ran = PyList_New(0);
        if (none_ran == NULL) goto fail;
        Py_SETREF(ran, none_ran);
    }
    Py_DECREF(sargs);
    Py_DECREF(sargs_slow);
    Py_DECREF(skips);
    Py_XDECREF(pending);
    PyObject *out = Py_BuildValue("(iLLLOOLy#L)", reason, looks, n, next_t, seen ? seen : Py_None,
                                  ran ? ran : Py_None, look_cpu, stop_buf, (Py_ssize_t)stop_n, quiet);
    Py_XDECREF(seen);
    Py_XDECREF(ran);
    return out;
fail:
    w->n_own_skip = 0;
    Py_XDECREF(sargs);
    Py_XDECREF(sargs_slow);
    Py_XDECREF(skips);
    Py_XDECREF(pending);
    Py_XDECREF(seen);
    Py_XDECREF(ran);
    return NULL;
}

/* lane(lock, until_ns, mem, rss_fd, page, period_ns, stop_fd, stop_sigs, finished, limit) -> (reason, rows,
   stop_bytes): the memory lane alone (sampling off: no look is due, and the recorder loop woke ~100 times a second
   to read /proc/self/statm, each time taking the GIL from a busy main thread, which then waited for it: ~1 wait a
   10-20 ms denoising step). Here the RSS is read every period_ns (from mem.last_t) without the GIL, the rows kept in
   this call, until until_ns or anything else is due, and appended to the lane (as MemoryLane.sample does, with no
   CUDA figures) once the GIL is taken back. Reasons (looks.c's top): 0 until_ns reached, 1 woken (notify, or lock
   released at the call), 5 a stop signal (its bytes returned), 6 finished spans wait to be written (limit: the C
   recorder's count and the deque's length, read without the GIL as a hint), 7 a profiler or tracer of the program's
   is active (at the call), 9 the rows' buffer is full. rows: the rows appended. */
#define LANE_ROWS 1024
PyObject *walker_lane(PyObject *walker, PyObject *args) {
    Walker *w = (Walker *)walker;
    PyObject *lock, *mem, *stop_sigs, *finished;
    long long until, page, period, limit;
    int rss_fd, stop_fd;
    if (!PyArg_ParseTuple(args, "OLOiLLiSOL:lane", &lock, &until, &mem, &rss_fd, &page, &period, &stop_fd, &stop_sigs,
                          &finished, &limit))
        return NULL;
    if (period <= 0 || rss_fd < 0) {
        PyErr_SetString(PyExc_ValueError, "lane: period_ns > 0 and an open rss_fd");
        return NULL;
    }
    int efd = wake_fd(w);
    if (efd < 0) return NULL;
    PyObject *r = PyObject_CallMethod(lock, "acquire", "i", 0); /* (released: the session's finish, a fork) */
    int got = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    if (got < 0) return NULL;
    if (got) {
        r = PyObject_CallMethodNoArgs(lock, s_release);
        if (r == NULL) return NULL;
        Py_DECREF(r);
        return Py_BuildValue("(iiy)", 1, 0, "");
    }
    int f = foreign_tool();
    if (f < 0) return NULL;
    if (f) return Py_BuildValue("(iiy)", 7, 0, "");
    PyObject *lt = PyObject_GetAttr(mem, s_last_t);
    long long last = lt == NULL ? -1 : PyLong_AsLongLong(lt);
    Py_XDECREF(lt);
    if (last == -1 && PyErr_Occurred()) return NULL;
    PyObject *pending = PyObject_GetAttrString(mem, "pending");
    if (pending == NULL) return NULL;
    /* (the finished spans' deque: its length is its ob_size, read below without the GIL, as a hint only) */
    Py_ssize_t waiting = PyObject_Size(finished);
    if (waiting < 0) { Py_DECREF(pending); return NULL; }
    volatile Py_ssize_t *fin_len = Py_TYPE(finished)->tp_itemsize == 0 && PyObject_TypeCheck(finished, Py_TYPE(pending))
                                       ? &((PyVarObject *)finished)->ob_size : NULL;
    int64_t *ts = PyMem_Malloc(LANE_ROWS * sizeof(int64_t));
    long long *rss = PyMem_Malloc(LANE_ROWS * sizeof(long long));
    if (ts == NULL || rss == NULL) {
        PyMem_Free(ts);
        PyMem_Free(rss);
        Py_DECREF(pending);
        return PyErr_NoMemory();
    }
    int n = 0, reason = 0;
    char buf[96], stop_buf[256];
    ssize_t stop_n = 0;
    volatile Py_ssize_t *c_fin = &n_fin;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        if (now >= until) { reason = 0; break; }
        int64_t due = last + period < until ? last + period : until;
        if (due > now) {
            struct timespec left = {(time_t)((due - now) / 1000000000LL), (long)((due - now) % 1000000000LL)};
            struct pollfd p[2] = {{efd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
            int k = ppoll(p, stop_fd >= 0 ? 2 : 1, &left, NULL);
            if (k > 0 && (p[0].revents & POLLIN)) {
                uint64_t v;
                if (read(efd, &v, sizeof v) == (ssize_t)sizeof v) { reason = 1; break; }
            }
            if (k > 0 && stop_fd >= 0 && (p[1].revents & POLLIN)) { /* (other signals' bytes: dropped, as run does) */
                ssize_t g = read(stop_fd, stop_buf, sizeof stop_buf);
                if (has_stop(stop_buf, g, stop_sigs)) { stop_n = g; reason = 5; break; }
            }
            continue;
        }
        rss[n] = parse_rss(rss_fd, page, buf, -1);
        ts[n++] = last = now;
        if (n == LANE_ROWS) { reason = 9; break; }
        if ((fin_len != NULL ? *fin_len : waiting) + *c_fin >= limit) { reason = 6; break; }
    }
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    int i = 0;
    for (; i < n; i++)
        if (append_rss(mem, pending, ts[i], rss[i]) < 0) break;
    if (i == n) out = Py_BuildValue("(iiy#)", reason, n, stop_buf, (Py_ssize_t)stop_n);
    PyMem_Free(ts);
    PyMem_Free(rss);
    Py_DECREF(pending);
    return out;
}

PyObject *walker_notify(PyObject *walker, PyObject *unused) {
    Walker *w = (Walker *)walker;
    if (w->wake_fd1 > 0) {
        uint64_t one = 1;
        if (write(w->wake_fd1 - 1, &one, sizeof one) < 0) { /* (EAGAIN: the counter is full, a wake-up is pending) */
        }
    }
    Py_RETURN_NONE;
}

int looks_init(void) {
    s_release = PyUnicode_InternFromString("release");
    s_last_t = PyUnicode_InternFromString("last_t");
    s_last = PyUnicode_InternFromString("last");
    s_count = PyUnicode_InternFromString("count");
    s_append = PyUnicode_InternFromString("append");
    s_active = PyUnicode_InternFromString("active");
    s_resting = PyUnicode_InternFromString("resting");
    return s_release && s_last_t && s_last && s_count && s_append && s_active && s_resting ? 0 : -1;
}

#endif /* STEPSCOPE_STACKWALK */
