/* stepscope.record.native._native: a busy thread sampled by a timer of its own (ownclock.h; issue 41).

   The recorder thread reads the other threads' stacks at each look, a wake-up of its own (~45 us of CPU on a 2-core
   VM, more than a look without the GIL, remote.c): on a server whose one busy thread (a UNet worker) runs all the
   time, 101 wake-ups a second were most of what sampling cost (~9 ms of CPU a second). So, as Datadog's profiler's
   newer mode does, a thread that runs all the time gets a POSIX timer of its own (timer_create, SIGEV_THREAD_ID: the
   signal goes to that thread, which it finds running, so no wake-up), and the recorder looks every OWN_SLOW periods
   while the threads that sample themselves are the only ones that run. The timer is on CLOCK_MONOTONIC, each expiry
   drawn in 0.5-1.5 periods (re-armed by the handler): a timer on the thread's CPU clock expires only at the kernel's
   tick, in lockstep with a program whose period is a multiple of it (a loop of 30 ms then 10 ms of Python read
   66-82% for its 75%; with this one 73-78%, and 25%, 50%, 35% within 3 points for other splits). So:

   - the handler (async-signal-safe, in the thread itself, wherever it is: Python code, a C call with or without the
     GIL) reads its own stack as a look without the GIL does (raw_stack: process_vm_readv through its slot's page
     copies, only codes the walker holds, from the known set remote.c publishes), and pushes the sample (time, its
     CPU clock, the raw frames) into its slot's ring (one writer, the handler; one reader, the recorder). A stack
     with a code the walker does not hold yet is a miss: counted, and the recorder reads that thread at its next look
     (a look with the GIL learns the code);
   - at each look (own_decide), a thread that ran at least OWN_BUSY of the time since the previous one and missed
     nothing is left out of the look (its own samples stand for it); one that ran less has its sampling turned off
     (the handler returns at once) and is read by the look, as before: a thread that waits is sampled at the wall
     rate, its waits at their stacks. It is armed again after OWN_STREAK busy looks in a row;
   - at the next hold of the GIL the rings are drained (own_drain): each sample interned and charged as a look's
     (walker_charge: the wall time since that thread's previous sample, its CPU time meanwhile), before the look's own.

   The slots are the process's (a handler finds its slot by the timer's sigev_value); one walker owns them at a
   time (the first that decides), until own_stop (its session's end, its clearing). A fork leaves the child no
   timer: its slots are freed there (pthread_atfork). The signal is a real-time one the Python side picked as free
   (record/sampling/owntimers.py) and installed here (own_signal), with SA_RESTART. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ownclock.h"
#include "remote.h"

#ifdef STEPSCOPE_STACKWALK

#if defined(__linux__)
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#define OWN_SLOTS 16
#define OWN_RING 64     /* samples a slot holds until drained (250 ms at most at 101 Hz: ~25) */
#define OWN_DEPTH 256   /* raw frames a sample holds (deeper: a miss) */
#define OWN_STREAK 5    /* busy looks in a row before a thread's timer is armed */
#define OWN_STREAK_MAX 64 /* ... at most, for one whose timer was turned off while it still ran (own_decide) */
#define OWN_BUSY_PCT 90 /* a thread that ran this share of the time (%) between two looks is busy */
#define OWN_BLOCK 8     /* expiries at the period between two drawn ones */
/* what a signal costs its thread beside its handler (the timer's interrupt, the signal frame, sigreturn, the caches
   and branch predictors it cools), counted in the overhead budget: on this 2-core VM a C loop lost 1.9% of its CPU
   to 1,000 such signals a second, and the tiny UNet's generations 0.42% (95% CI 0.28-0.59%) of theirs to 101 a
   second of an empty handler (150 pairs of generations, with and without, alternating in one thread) */
#define OWN_SIGNAL_NS 40000
/* the shortest period a thread's own timer samples at: at a higher rate the signals cost its thread more than the
   looks cost the recorder (the 12-thread server at 1 kHz: its generations +8.0% with them, +3.4% without) */
#define OWN_MIN_PERIOD_NS 5000000
#define OWN_CAP_NS 1000000000LL /* the most wall time one of a thread's own samples is charged */

enum { FREE, WATCH, ON, OFF }; /* a slot: unused; a thread counted busy; sampled by its timer; its timer idle */

typedef struct {
    int64_t t, cpu;
    int32_t n;
    RawFrame fr[OWN_DEPTH];
} OwnSample;

typedef struct {
    Reader rd;
    OwnSample ring[OWN_RING];
} OwnRing;

typedef struct {
    int state, in_handler;          /* (atomic: the handler reads them) */
    unsigned long tid, native;      /* threading.get_ident() (pthread_self), OS thread id */
    uintptr_t ts;                   /* its thread state */
    int64_t ref_t, ref_cpu;         /* the previous decision's time and CPU clock */
    int streak, need, has_timer; /* busy looks in a row, and how many arm its timer */
    int64_t period;                 /* the timer's interval (ns, CLOCK_MONOTONIC), 0: disarmed */
    timer_t timer;
    uint32_t head, tail;            /* ring positions: head the handler's, tail the recorder's (atomic) */
    long long misses, dropped;      /* the handler's counts (atomic) */
    int64_t ns, ns_counted;             /* the handler's time (ns, atomic), and as drained */
    uint64_t rng;                       /* the handler's xorshift state (its next expiry's draw) */
    int block;                          /* expiries since the last draw */
    long long misses_seen, misses_counted; /* (the recorder's: misses at the last decision, at the last drain) */
    Wanted want[4];                     /* codes the handler met not held yet (remote_learn at the drain) */
    uint32_t want_head, want_tail;      /* (atomic: the handler's, the recorder's) */
    OwnRing *ring;
} OwnSlot;

static OwnSlot slots[OWN_SLOTS];
static Walker *owner;
static int own_sig;               /* the installed signal (0: none) */
static const Known *volatile known_now; /* the owner's known set, as at its last decision (read by the handlers) */
static int atfork_done;

static void handler(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    int saved = errno;
    int k = si->si_code == SI_TIMER ? si->si_value.sival_int : -1;
    if (k >= 0 && k < OWN_SLOTS) {
        OwnSlot *s = &slots[k];
        __atomic_store_n(&s->in_handler, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) == ON && s->tid == (unsigned long)pthread_self()) {
            int64_t t0 = clock_ns(CLOCK_MONOTONIC);
            uint32_t h = s->head, tl = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
            if (h - tl >= OWN_RING) {
                __atomic_add_fetch(&s->dropped, 1, __ATOMIC_RELAXED);
            } else {
                OwnSample *o = &s->ring->ring[h % OWN_RING];
                Wanted want;
                int32_t n = raw_stack(&s->ring->rd, known_now, s->ts, o->fr, OWN_DEPTH, &want);
                if (n < 0) {
                    __atomic_add_fetch(&s->misses, 1, __ATOMIC_RELAXED);
                    uint32_t wh = s->want_head;
                    if (want.code != 0 && wh - __atomic_load_n(&s->want_tail, __ATOMIC_ACQUIRE) < 4) {
                        s->want[wh % 4] = want;
                        __atomic_store_n(&s->want_head, wh + 1, __ATOMIC_RELEASE);
                    }
                } else {
                    o->n = n;
                    o->t = clock_ns(CLOCK_MONOTONIC);
                    o->cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
                    __atomic_store_n(&s->head, h + 1, __ATOMIC_RELEASE);
                }
            }
            /* every OWN_BLOCK expiries the next block's interval drawn in 0.5-1.5 periods (xorshift), as the main
               thread's timers: never in lockstep with the program's own period (a re-arm, ~7 us here, is not made at
               each). Only the block's first expiry drawn, its interval the period, a 30 ms + 10 ms loop sampled at
               50.5 Hz was read at two phases a block: its 75% read 65-69% in 3 runs of 4 */
            if (++s->block >= OWN_BLOCK) {
                s->block = 0;
                uint64_t x = s->rng;
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                s->rng = x;
                int64_t next = s->period / 2 + (int64_t)(x % (uint64_t)(s->period > 0 ? s->period : 1));
                struct itimerspec it = {{(time_t)(next / 1000000000LL), (long)(next % 1000000000LL)},
                                        {(time_t)(next / 1000000000LL), (long)(next % 1000000000LL)}};
                timer_settime(s->timer, 0, &it, NULL);
            }
            /* (its time, and the signal's delivery and return around it, which it cannot time: OWN_SIGNAL_NS) */
            __atomic_add_fetch(&s->ns, clock_ns(CLOCK_MONOTONIC) - t0 + OWN_SIGNAL_NS, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&s->in_handler, 0, __ATOMIC_SEQ_CST);
    }
    errno = saved;
}

/* slot k's sampling stopped: no handler reads its ring once this returns (one that runs now is waited for); its
   timer disarmed (a thread that waits is not woken by it) */
static void quiesce(OwnSlot *s, int state) {
    __atomic_store_n(&s->state, state, __ATOMIC_SEQ_CST);
    for (int i = 0; __atomic_load_n(&s->in_handler, __ATOMIC_SEQ_CST) && i < 100000; i++) sched_yield();
    if (s->has_timer && s->period) { /* (after the handler: none re-arms it from here on) */
        struct itimerspec off = {{0, 0}, {0, 0}};
        timer_settime(s->timer, 0, &off, NULL);
        s->period = 0;
    }
}

static void release(OwnSlot *s) {
    quiesce(s, FREE);
    if (s->has_timer) timer_delete(s->timer);
    s->has_timer = 0;
    s->period = 0;
    s->native = 0;
}

static void child_after_fork(void) { /* (no timer survives a fork: the slots are free in the child) */
    for (int k = 0; k < OWN_SLOTS; k++) {
        slots[k].state = FREE;
        slots[k].in_handler = 0;
        slots[k].has_timer = 0;
        slots[k].native = 0;
        slots[k].head = slots[k].tail = slots[k].want_head = slots[k].want_tail = 0;
    }
    owner = NULL;
}

/* the slot's timer armed at period (created at its first arming); 0, or -1 */
static int arm(OwnSlot *s, int k, int64_t period) {
    if (!s->has_timer) {
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = own_sig;
        ev.sigev_value.sival_int = k;
#ifdef sigev_notify_thread_id
        ev.sigev_notify_thread_id = (pid_t)s->native;
#else
        ev._sigev_un._tid = (pid_t)s->native;
#endif
        if (timer_create(CLOCK_MONOTONIC, &ev, &s->timer) != 0) return -1;
        s->has_timer = 1;
    }
    if (s->period != period) {
        struct itimerspec it = {{(time_t)(period / 1000000000LL), (long)(period % 1000000000LL)},
                                {(time_t)(period / 1000000000LL), (long)(period % 1000000000LL)}};
        if (timer_settime(s->timer, 0, &it, NULL) != 0) return -1;
        s->period = period;
    }
    return 0;
}

int own_decide(Walker *w, unsigned long tid, unsigned long native, uintptr_t ts, int64_t t, int64_t cpu,
               int64_t period, int ran) {
    int64_t own = w->own_period > period ? w->own_period : period; /* (the overhead budget's: Budget.tick) */
    if (!own_sig || !w->own_on || native == 0 || (owner != NULL && owner != w)) return 0;
    if (cpu < 0) { /* (its CPU clock gone: the thread ended, its timer deleted now, not at the walker's next look) */
        for (int i = 0; owner == w && i < OWN_SLOTS; i++)
            if (slots[i].state != FREE && slots[i].native == native) release(&slots[i]);
        return 0;
    }
    if (period < OWN_MIN_PERIOD_NS) { /* (a rate above 200 Hz: the looks read every thread) */
        for (int i = 0; owner == w && i < OWN_SLOTS; i++)
            if (slots[i].state == ON) quiesce(&slots[i], OFF);
        return 0;
    }
    owner = w;
    known_now = remote_known(w);
    int k = -1, free_k = -1;
    for (int i = 0; i < OWN_SLOTS && k < 0; i++) {
        if (slots[i].state != FREE && slots[i].native == native) k = i;
        else if (slots[i].state == FREE && free_k < 0) free_k = i;
    }
    if (k < 0) { /* a thread not watched yet, that ran most of the time since the run's last look: from this look on */
        if (free_k < 0 || !ran) return 0;
        OwnSlot *s = &slots[free_k];
        *s = (OwnSlot){.state = WATCH, .tid = tid, .native = native, .ts = ts, .ref_t = t, .ref_cpu = cpu,
                       .need = OWN_STREAK, .rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)t ^ native, .ring = s->ring};
        return 0;
    }
    OwnSlot *s = &slots[k];
    /* busy: it ran OWN_BUSY_PCT of the time since the last decision. Not one that waited, for anything: a lock, a
       queue, a sleep must be seen at their stacks (the looks read them), and so must a wait for a CPU (a busy
       machine): when the timer was on its CPU clock, a thread alternating 30 ms and 10 ms phases of wall time and
       run a third of the time read +4 to +8.5 points in the long phase, where the looks read it within a point;
       and a timer that wakes a waiting thread costs the wake-up these timers are here to save */
    int64_t dt = t - s->ref_t, d = cpu - s->ref_cpu;
    int busy = dt > 0 && d * 100 >= dt * OWN_BUSY_PCT;
    s->ref_t = t;
    s->ref_cpu = cpu;
    if (s->tid != tid || s->ts != ts) { /* (another thread with that OS id, or its state moved: watched afresh) */
        if (s->state == ON) quiesce(s, OFF);
        s->tid = tid;
        s->ts = ts;
        s->streak = 0;
        return 0;
    }
    long long missed = __atomic_load_n(&s->misses, __ATOMIC_RELAXED);
    int clean = missed == s->misses_seen;
    s->misses_seen = missed;
    if (s->state == ON) {
        if (s->period != own && arm(s, k, own) < 0) { /* (the rate changed: the budget) */
            release(s);
            return 0;
        }
        if (busy && clean) return 1;
        if (!busy) {
            quiesce(s, OFF);
            s->streak = 0;
            /* (one that still ran a tenth of the time or more was kept from its CPU or waited in its work: it needs
               twice the busy looks in a row before its next timer, up to 64; one that stopped, waiting for work,
               the first 5 again. On an overloaded machine a thread's timer went on and off 3-11 times in 3 s, and
               its share read up to 9 points off, where the looks alone read it within 1.2) */
            s->need = d * 10 >= dt ? (s->need * 2 > OWN_STREAK_MAX ? OWN_STREAK_MAX : s->need * 2) : OWN_STREAK;
        }
        return 0;
    }
    s->streak = busy ? s->streak + 1 : 0;
    if (s->streak < s->need) return 0;
    if (s->ring == NULL && (s->ring = PyMem_RawCalloc(1, sizeof(OwnRing))) == NULL) return 0;
    s->ring->rd.pid = getpid();
    s->ring->rd.broken = 0;
    if (arm(s, k, own) < 0) {
        release(s);
        return 0;
    }
    __atomic_store_n(&s->state, ON, __ATOMIC_SEQ_CST); /* (sampled from its next expiry; this look reads it) */
    w->own_threads++;
    return 0;
}

int own_skipped(const Walker *w, unsigned long native) {
    for (Py_ssize_t i = 0; i < w->n_own_skip; i++)
        if (w->own_skip[i] == native) return 1;
    return 0;
}

int own_drain(Walker *w, int64_t period, int64_t cap) {
    if (owner != w) return 0;
    /* (a gap between two of a thread's own samples is its own time: its timer fired while it waited for a CPU, and
       the signal came once it ran again; a look's cap of three periods, there for a recorder kept from its looks,
       would drop it: a busy thread on an overloaded machine charged 2.3-2.8 s of its 3) */
    if (cap < OWN_CAP_NS) cap = OWN_CAP_NS;
    for (int k = 0; k < OWN_SLOTS; k++) {
        OwnSlot *s = &slots[k];
        if (s->state == FREE || s->ring == NULL) continue;
        uint32_t h = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE), tl = s->tail;
        for (; tl != h; tl++) {
            OwnSample *o = &s->ring->ring[tl % OWN_RING];
            int32_t si = intern_raw(w, o->fr, o->n);
            if (si == NOT_SHOWN) si = intern_stack(w, 0);
            if (si < 0 || walker_charge(w, s->tid, o->t, o->cpu, si, period, cap) < 0) {
                __atomic_store_n(&s->tail, tl + 1, __ATOMIC_RELEASE);
                return -1;
            }
            w->own_samples++;
        }
        __atomic_store_n(&s->tail, tl, __ATOMIC_RELEASE);
        for (uint32_t wh = __atomic_load_n(&s->want_head, __ATOMIC_ACQUIRE); s->want_tail != wh;) {
            Wanted want = s->want[s->want_tail % 4];
            __atomic_store_n(&s->want_tail, s->want_tail + 1, __ATOMIC_RELEASE);
            if (remote_learn(w, &want) < 0) return -1; /* (the code held: the handler reads it from the next sync) */
        }
        long long m = __atomic_load_n(&s->misses, __ATOMIC_RELAXED) + __atomic_load_n(&s->dropped, __ATOMIC_RELAXED);
        w->own_misses += m - s->misses_counted;
        s->misses_counted = m;
        int64_t ns = __atomic_load_n(&s->ns, __ATOMIC_RELAXED);
        w->own_ns += ns - s->ns_counted;
        s->ns_counted = ns;
        int alive = 0; /* (a thread the walker no longer knows has ended: its slot freed) */
        for (Py_ssize_t i = 0; i < w->n_threads && !alive; i++) alive = w->threads[i].native == s->native;
        if (!alive) release(s);
    }
    return 0;
}

void own_stop(Walker *w) {
    if (owner != w) return;
    for (int k = 0; k < OWN_SLOTS; k++) {
        OwnSlot *s = &slots[k];
        if (s->state != FREE) release(s);
        PyMem_RawFree(s->ring); /* (no handler reads it: FREE, and none runs) */
        s->ring = NULL;
    }
    owner = NULL;
    known_now = NULL;
}

PyObject *own_signal(PyObject *module, PyObject *arg) {
    int signum = PyLong_AsLong(arg);
    if (signum == -1 && PyErr_Occurred()) return NULL;
    if (!atfork_done) {
        if (pthread_atfork(NULL, NULL, child_after_fork) != 0) return PyErr_SetFromErrno(PyExc_OSError);
        atfork_done = 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    if (signum > 0) {
        sa.sa_sigaction = handler;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        if (sigaction(signum, &sa, NULL) != 0) return PyErr_SetFromErrno(PyExc_OSError);
        own_sig = signum;
    } else if (own_sig) { /* (no timer left: ignored first, so a signal still queued is dropped, then the default) */
        sa.sa_handler = SIG_IGN;
        sigaction(own_sig, &sa, NULL);
        sa.sa_handler = SIG_DFL;
        sigaction(own_sig, &sa, NULL);
        own_sig = 0;
    }
    Py_RETURN_NONE;
}

#else /* not Linux: no thread's own timer; every look reads every thread */

int own_decide(Walker *w, unsigned long tid, unsigned long native, uintptr_t ts, int64_t t, int64_t cpu,
               int64_t period, int ran) {
    (void)w, (void)tid, (void)native, (void)ts, (void)t, (void)cpu, (void)period, (void)ran;
    return 0;
}
int own_drain(Walker *w, int64_t period, int64_t cap) { (void)w, (void)period, (void)cap; return 0; }
void own_stop(Walker *w) { (void)w; }
int own_skipped(const Walker *w, unsigned long native) { (void)w, (void)native; return 0; }
PyObject *own_signal(PyObject *module, PyObject *arg) {
    (void)module, (void)arg;
    PyErr_SetString(PyExc_OSError, "own_signal: Linux only");
    return NULL;
}

#endif

PyObject *walker_own_stop(PyObject *walker, PyObject *unused) {
    (void)unused;
    own_stop((Walker *)walker);
    Py_RETURN_NONE;
}

#endif /* STEPSCOPE_STACKWALK */
