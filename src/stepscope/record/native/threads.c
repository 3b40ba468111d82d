/* stepscope.record.native._native: each thread's accounting between the sampler's looks (Walker methods; issue 41).

   sampling/sampler.py's Sampler.sample did this in Python, ~2 us a thread on top of the walk: read the thread's CPU
   clock; when it has not moved since the previous look, the thread has not run, so it is recorded again on its
   previous stack, unwalked; else its stack is walked (stackwalk.c) and the sample is charged the wall time since
   its previous one (at most cap_ns) and the CPU time it used meanwhile. A thread with slack (the resting main
   thread) that moved by no more than it is walked all the same (a wait, a few us of Python, another wait: each at
   its own stack) but not listed as run (its slack less: the recorder wakes it once it has used it all).
   Here the same rules run in C, with the thread table (TRec: the previous sample's time, CPU clock and stack) and
   the samples (rows of 5 int64: time, thread id, walker stack index, wall ns, CPU ns) kept in the walker until
   rows() hands them over. The rules, their reasons and their edge cases are the Python sampler's, line for line
   (Sampler.sample, sample_blocked, hand_over, take_back, restart): the Python walk keeps them for STEPSCOPE_SAMPLER=
   python, and tests/test_stackwalk.py checks the two agree.

   A thread's CPU clock is the kernel's per-thread clock (clock_gettime on the id MAKE_THREAD_CPUCLOCK(tid,
   CPUCLOCK_SCHED): ((~tid) << 3) | 6, as time.clock_gettime_ns is given in sampler.thread_cpu_ns), one system call;
   its OS id is the thread state's native_thread_id. Times are CLOCK_MONOTONIC ns (time.perf_counter_ns). Everything
   runs with the GIL held, as the walk does. */

#include "threads.h"
#include "recorder.h"
#include "remote.h"
#include "ownclock.h"

#ifdef STEPSCOPE_STACKWALK

#include <time.h>


/* the CPU time (ns) used so far by the thread with OS id native of this process; -1 when unknown */
int64_t thread_cpu(unsigned long native) {
#ifdef __linux__
    if (native == 0) return -1;
    struct timespec ts;
    if (clock_gettime((clockid_t)((~(unsigned int)native << 3) | 6u), &ts) != 0) return -1;
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
#else
    (void)native;
    return -1;
#endif
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* the thread tid's record, or NULL; hint: where it was at the previous look (the thread list keeps its order) */
static TRec *find(Walker *w, unsigned long tid, Py_ssize_t hint) {
    if (hint >= 0 && hint < w->n_threads && w->threads[hint].tid == tid) return &w->threads[hint];
    for (Py_ssize_t i = 0; i < w->n_threads; i++)
        if (w->threads[i].tid == tid) return &w->threads[i];
    return NULL;
}

/* a new record of tid with no previous sample and no slack; NULL with MemoryError set */
static TRec *add(Walker *w, unsigned long tid) {
    if (reserve((void **)&w->threads, w->n_threads, &w->cap_threads, sizeof(TRec), 1) < 0) return NULL;
    TRec *r = &w->threads[w->n_threads++];
    *r = (TRec){tid, 0, 0, -1, -1, -1, w->looks};
    r->seen = -1;
    return r;
}

static void drop(Walker *w, TRec *r) { *r = w->threads[--w->n_threads]; }

/* one sample row; 0, or -1 with MemoryError set */
int walker_row(Walker *w, int64_t t, unsigned long tid, int32_t stack, int64_t wall, int64_t cpu) {
    if (reserve((void **)&w->rows, w->n_rows, &w->cap_rows, 5 * sizeof(int64_t), 1) < 0) return -1;
    int64_t *p = w->rows + 5 * w->n_rows++;
    p[0] = t;
    p[1] = (int64_t)tid;
    p[2] = stack;
    p[3] = wall;
    p[4] = cpu;
    return 0;
}

/* whether a thread whose CPU clock reads cpu has not run since r's previous sample (its stack cannot have changed) */
/* whether r has not run since the last look that read it (its CPU clock then: seen) */
static inline int still(const TRec *r, int64_t cpu) { return cpu >= 0 && cpu == r->seen; }

/* the CPU time (ns) r used since its last row, for that row's CPU (0: unknown) */
static inline int64_t since_row(const TRec *r, int64_t cpu) { return cpu >= 0 && r->cpu >= 0 && cpu > r->cpu ? cpu - r->cpu : 0; }

/* whether r, whose CPU clock moved to cpu, used no more than its slack since the last look (a resting main thread:
   walked, not woken) */
static inline int within_slack(const TRec *r, int64_t cpu) {
    int64_t d = cpu - r->seen;
    return r->slack > 0 && cpu >= 0 && r->seen >= 0 && d > 0 && d <= r->slack;
}

static int in_ids(const unsigned long *ids, Py_ssize_t n, unsigned long tid) {
    for (Py_ssize_t k = 0; k < n; k++)
        if (ids[k] == tid) return 1;
    return 0;
}

/* r's sample at t on stack si, its CPU clock at cpu: the row (two when it waited most of a long gap, then ran), r
   brought to it; 0, or -1 with MemoryError set */
static int charge(Walker *w, TRec *r, int64_t t, int64_t cpu, int32_t si, int64_t period, int64_t cap) {
    int64_t wall, used;
    if (r->stack < 0) { /* its CPU time so far stands for its last period (a new thread: ~0) */
        wall = period;
        used = cpu >= 0 ? min64(cpu, period) : -1;
    } else {
        int64_t gap = t - r->t, d = cpu - r->cpu;
        wall = min64(gap, cap);
        used = cpu >= 0 && r->cpu >= 0 ? min64(d, wall) : -1;
        if (gap > cap && d >= 0 && d < gap / 2) {
            /* it waited most of the gap, then ran: the wait at its previous stack, the run at this one; a span it
               started meanwhile woke a resting recorder (call_wake): it ran from then on, whenever the look came */
            int64_t run = min64(gap, max64(d, period));
            if (r->tid == call_wake_tid && call_wake_t > r->t && call_wake_t < t) run = max64(run, t - call_wake_t);
            if (walker_row(w, t - run, r->tid, r->stack, gap - run, 0) < 0) return -1;
            wall = run;
            used = d;
        }
    }
    if (walker_row(w, t, r->tid, si, wall, used) < 0) return -1;
    r->t = t;
    r->cpu = r->seen = cpu;
    r->stack = si;
    return 0;
}

int walker_charge(Walker *w, unsigned long tid, int64_t t, int64_t cpu, int32_t si, int64_t period, int64_t cap) {
    TRec *r = find(w, tid, -1);
    return r == NULL || t < r->t ? 0 : charge(w, r, t, cpu, si, period, cap);
}

/* sample(skip, period_ns, cap_ns, lazy=False, busy=-1) -> (seen, ran, n): Sampler.sample's look and accounting (see
   the top). lazy (a resting recorder's look): a thread that has not run since the last look gets no row (as at a
   quiet look), nor does one that ran but is back at the stack of its last row (an event loop's timer: its next row is
   charged the time and the CPU since that one); deferred counts them. busy (1: traced calls ended since the last
   look; -1: as set by Walker.run): a resting thread's slack does not refill (a step loop wakes the main thread). */
PyObject *walker_sample(Walker *w, PyObject *args) {
    PyObject *skip;
    long long period, cap;
    int lazy = 0, busy = -1;
    if (!PyArg_ParseTuple(args, "OLL|pi", &skip, &period, &cap, &lazy, &busy)) return NULL;
    if (busy >= 0) w->busy = busy != 0; /* (else as Walker.run set it) */
    if (own_drain(w, period, cap) < 0) return NULL; /* (the samples of the threads' own timers first: ownclock.c) */
    unsigned long sbuf[32], *sk;
    Py_ssize_t nsk = read_ids(skip, sbuf, 32, &sk);
    if (nsk < 0) return NULL;
    PyObject *seen = PyList_New(0), *ran = PyList_New(0), *out = NULL;
    if (seen == NULL || ran == NULL) goto done;
    uint64_t look = ++w->looks;
    w->moved = 0;
    w->used = 0;
    w->deferred = 0;
    int64_t t = clock_ns(CLOCK_MONOTONIC);
    Py_ssize_t n = 0, k = -1;
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(me->interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        _PyInterpreterFrame *top = TOP_FRAME(ts), *f = top;
        while (f != NULL && !shown(f)) f = f->previous;
        if (f == NULL) continue; /* no Python frame: not in sys._current_frames either */
        unsigned long tid = ts->thread_id;
        PyObject *id = PyLong_FromUnsignedLong(tid);
        if (id == NULL || PyList_Append(seen, id) < 0) { Py_XDECREF(id); goto done; }
        k++;
        TRec *r = find(w, tid, k);
        if (r != NULL) {
            r->look = look;
            r->ts = (uintptr_t)ts;
        }
        if (in_ids(sk, nsk, tid) || own_skipped(w, ts->native_thread_id)) { Py_DECREF(id); continue; }
        unsigned long native = ts->native_thread_id;
        int64_t cpu = -2;
        for (Py_ssize_t i = 0; i < w->n_pre && cpu == -2; i++) /* read before the GIL was taken (Walker.run) */
            if (w->pre_native[i] == native) cpu = w->pre_cpu[i];
        if (cpu == -2) cpu = thread_cpu(native);
        n++;
        if (r != NULL && r->stack >= 0 && still(r, cpu)) { /* blocked since: the same stack */
            Py_DECREF(id);
            if (lazy) { /* (no row: its next one is charged the time since its last) */
                r->still_t = t;
                w->deferred++;
                continue;
            }
            if (walker_row(w, t, tid, r->stack, t - r->t, since_row(r, cpu)) < 0) goto done;
            r->t = t;
            r->cpu = cpu;
            continue;
        }
        int rc = 0;
        if (r == NULL || r->stack < 0 || cpu < 0 || r->seen < 0 || cpu < r->seen) w->used = -1;
        else if (w->used >= 0) w->used += cpu - r->seen;
        if (!w->busy && r != NULL && r->slack_cap > 0 && r->slack >= 0 && t > r->t) /* (refilled: IDLE_SHARE) */
            r->slack = min64(max64(r->slack_cap, (t - r->t) / IDLE_SHARE), r->slack + (t - r->t) / IDLE_SHARE);
        if (r != NULL && r->stack >= 0 && within_slack(r, cpu)) { /* walked and charged, not woken: its slack less */
            r->slack -= cpu - r->seen;
            w->moved++;
        } else {
            rc = PyList_Append(ran, id);
        }
        Py_DECREF(id);
        if (rc < 0) goto done;
        int32_t si = walk_one(w, top);
        if (si == NOT_SHOWN) si = intern_stack(w, 0);
        if (si < 0) goto done;
        if (lazy && r != NULL && r->stack >= 0 && si == r->stack) { /* back where its last row was: left for later */
            r->seen = cpu;
            r->still_t = t;
            r->look = look;
            w->deferred++;
            continue;
        }
        if (r == NULL && (r = add(w, tid)) == NULL) goto done;
        if (charge(w, r, t, cpu, si, period, cap) < 0) goto done;
        r->native = native;
        r->look = look;
        r->ts = (uintptr_t)ts;
    }
    for (Py_ssize_t i = 0; i < w->n_threads;) { /* threads that ended (an id may come back for a new thread) */
        TRec *r = &w->threads[i];
        if (r->look == look) {
            i++;
            continue;
        }
        if (r->stack >= 0 && r->still_t > r->t) { /* found unmoved since its last row without a row: charged until then */
            if (walker_row(w, r->still_t, r->tid, r->stack, r->still_t - r->t, since_row(r, r->seen)) < 0) goto done;
        }
        drop(w, r);
    }
    out = Py_BuildValue("(OOn)", seen, ran, n);
done:
    Py_XDECREF(seen);
    Py_XDECREF(ran);
    if (sk != sbuf) PyMem_Free(sk);
    return out;
}

/* blocked(skip) -> n, or -1: Sampler.sample_blocked. When no thread read before (but those of skip) has run since
   (its CPU clock), each one's previous stack is recorded again, charged the time since, and the count returned;
   else nothing is recorded and -1 returned (a look is due). */
PyObject *walker_blocked(Walker *w, PyObject *skip) {
    unsigned long sbuf[32], *sk;
    Py_ssize_t nsk = read_ids(skip, sbuf, 32, &sk);
    if (nsk < 0) return NULL;
    long n = 0;
    for (Py_ssize_t i = 0; i < w->n_threads; i++) {
        TRec *r = &w->threads[i];
        if (r->stack < 0 || in_ids(sk, nsk, r->tid)) continue;
        if (!still(r, thread_cpu(r->native))) { n = -1; goto done; }
    }
    int64_t t = clock_ns(CLOCK_MONOTONIC);
    for (Py_ssize_t i = 0; i < w->n_threads; i++) {
        TRec *r = &w->threads[i];
        if (r->stack < 0 || in_ids(sk, nsk, r->tid)) continue;
        if (walker_row(w, t, r->tid, r->stack, t - r->t, since_row(r, r->seen)) < 0) { n = -2; goto done; }
        r->t = t;
        r->cpu = r->seen;
        n++;
    }
done:
    if (sk != sbuf) PyMem_Free(sk);
    return n == -2 ? NULL : PyLong_FromLong(n);
}

/* Whether the CPU time `used` (ns; -1: unknown) that the walked threads used by t counts as idle: the allowance refills
   at IDLE_SHARE of the time passed, up to IDLE_CAP_NS or that share of the time since the last call if more (looks far
   apart), and is spent; once it does not cover `used` it is emptied. */
int walker_idle_spend(Walker *w, int64_t t, int64_t used) {
    if (w->idle_t > 0 && t > w->idle_t) {
        int64_t more = (t - w->idle_t) / IDLE_SHARE; /* (at most IDLE_CAP_NS, or the share of the time since) */
        w->idle_tokens = min64(max64(IDLE_CAP_NS, more), w->idle_tokens + more);
    }
    if (t > w->idle_t) w->idle_t = t;
    if (used < 0 || used > w->idle_tokens) {
        w->idle_tokens = 0;
        return 0;
    }
    w->idle_tokens -= used;
    return 1;
}

/* idle(t_ns, ran, busy=False) -> bool: Sampler.idle. Whether the last sample() counts as idle at t_ns: nothing ran
   (ran False: only the allowance refills) or what its walked threads used is within walker_idle_spend's allowance
   and nothing else says the program works (busy: traced calls ended since the last look). */
PyObject *walker_idle(Walker *w, PyObject *args) {
    long long t;
    int ran, busy = 0;
    if (!PyArg_ParseTuple(args, "Lp|p", &t, &ran, &busy)) return NULL;
    return PyBool_FromLong(walker_idle_spend(w, t, !ran ? 0 : busy ? -1 : w->used));
}

/* unmoved(skip) -> n, or -1: Sampler.unmoved. The number of threads read before (but those of skip) when none has run
   since (its CPU clock, as blocked()), else -1; no row either way (a resting recorder's look: each one's next row is
   charged the whole time since its previous one), but each one's still_t is now (a thread that ends before the next
   look is charged at its stack until then: sample()). */
PyObject *walker_unmoved(Walker *w, PyObject *skip) {
    unsigned long sbuf[32], *sk;
    Py_ssize_t nsk = read_ids(skip, sbuf, 32, &sk);
    if (nsk < 0) return NULL;
    long n = 0;
    for (Py_ssize_t i = 0; i < w->n_threads; i++) {
        TRec *r = &w->threads[i];
        if (r->stack < 0 || in_ids(sk, nsk, r->tid)) continue;
        if (!still(r, thread_cpu(r->native))) { n = -1; break; }
        n++;
    }
    if (n >= 0) { /* (each was still at its stack until now: a thread that ends before the next look is charged so far) */
        int64_t t = clock_ns(CLOCK_MONOTONIC);
        for (Py_ssize_t i = 0; i < w->n_threads; i++)
            if (w->threads[i].stack >= 0 && !in_ids(sk, nsk, w->threads[i].tid)) w->threads[i].still_t = t;
    }
    if (sk != sbuf) PyMem_Free(sk);
    return PyLong_FromLong(n);
}

/* hand_over(tid, native, t_ns, cpu_ns, stack, slack): Sampler.hand_over. From now on sample() reads tid too, its
   previous sample at t_ns with its CPU clock at cpu_ns on the walker stack `stack` (-1: none, its next sample is a
   first one), and it may use slack CPU ns meanwhile and still count as not run. */
PyObject *walker_hand_over(Walker *w, PyObject *args) {
    unsigned long tid, native;
    long long t, cpu, slack;
    int stack;
    if (!PyArg_ParseTuple(args, "kkLLiL", &tid, &native, &t, &cpu, &stack, &slack)) return NULL;
    TRec *r = find(w, tid, -1);
    if (r == NULL && (r = add(w, tid)) == NULL) return NULL;
    r->native = native;
    r->slack = slack;
    r->slack_cap = slack;
    r->seen = cpu;
    r->stack = stack >= 0 && stack < w->n_stacks ? stack : -1;
    r->t = t;
    r->cpu = cpu;
    Py_RETURN_NONE;
}

/* forget(tid, whole=True) -> (t_ns, cpu_ns, stack) of tid's previous sample, or None. whole: its record dropped
   (slack too: Sampler.take_back); else only its previous sample (its next one is a first one: Sampler.restart).
   tid None: every thread's (the result None). */
PyObject *walker_forget(Walker *w, PyObject *args) {
    PyObject *who;
    int whole = 1;
    if (!PyArg_ParseTuple(args, "O|p", &who, &whole)) return NULL;
    if (who == Py_None) {
        for (Py_ssize_t i = 0; i < w->n_threads; i++) w->threads[i].stack = -1;
        if (whole) w->n_threads = 0;
        Py_RETURN_NONE;
    }
    unsigned long tid = PyLong_AsUnsignedLong(who);
    if (tid == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    TRec *r = find(w, tid, -1);
    if (r == NULL) Py_RETURN_NONE;
    PyObject *out = r->stack >= 0 ? Py_BuildValue("(LLi)", (long long)r->t, (long long)r->cpu, (int)r->stack)
                                  : Py_NewRef(Py_None);
    if (whole) drop(w, r);
    else r->stack = -1;
    return out;
}

/* rows() -> [(t_ns, thread id, walker stack index, wall_ns, cpu_ns)]: the samples recorded since the last call.
   Only the rows there at the call are taken: each tuple's allocation may run the garbage collector (3.11), and with
   it Python code that can hand the GIL to the main thread, whose signal handler (sigtick.c) then adds rows (and may
   move the array); those stay for the next call. */
PyObject *walker_rows(Walker *w, PyObject *unused) {
    Py_ssize_t n = w->n_rows, i = 0;
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (; i < n && i < w->n_rows; i++) { /* (w->n_rows below n only after a reset meanwhile) */
        const int64_t *p = w->rows + 5 * i;
        PyObject *t = Py_BuildValue("(LkLLL)", (long long)p[0], (unsigned long)p[1], (long long)p[2],
                                    (long long)p[3], (long long)p[4]);
        if (t == NULL) {
            Py_SET_SIZE(out, i); /* (the items not yet set are NULL: not decref'd) */
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    Py_SET_SIZE(out, i);
    Py_ssize_t rest = w->n_rows - i;
    if (rest > 0) memmove(w->rows, w->rows + 5 * i, (size_t)rest * 5 * sizeof(int64_t));
    w->n_rows = rest > 0 ? rest : 0;
    return out;
}

void threads_clear(Walker *w) {
    PyMem_Free(w->threads);
    PyMem_Free(w->rows);
    w->threads = NULL;
    w->rows = NULL;
    w->n_threads = w->cap_threads = w->n_rows = w->cap_rows = 0;
}

#endif /* STEPSCOPE_STACKWALK */
