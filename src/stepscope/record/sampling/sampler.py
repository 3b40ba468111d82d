"""The sampling profiler: every thread's Python stack, on the spans' clock.

Shape of the data (Sentry's sampled profile v1 and speedscope's shared frame table):

- a frame table, one entry per distinct ``(code object, current line)``: ``(function, module, file, line)``
  (looked up by ``(id(code), f_lasti)``, plain reads, so the line number is computed once per instruction);
- a stack table, one entry per distinct stack: a tuple of frame indices, **root first**;
- samples: ``(t_ns, thread_id, stack_index, wall_ns, cpu_ns)``: ``t_ns`` the ``perf_counter_ns`` reading when
  the stack was read; ``wall_ns`` the wall time and ``cpu_ns`` the CPU time the sample stands for (-1: unknown).

Two drivers fill the same tables (``lock`` serialises them):

- ``sample()``: every thread's stack at once from another thread, called by the recorder thread at the profiling
  rate. The stacks are read by the C walk (``native.ext.Walker``, stackwalk.c: each thread's interpreter frames read in
  place, no frame object made, a stack seen before costs a hash lookup; its new frames and stacks are resolved here,
  once each; each thread's CPU-clock read and accounting below are C too: threads.c, the walker's ``sample``,
  which keeps those samples until ``drain``) or, as a fallback (``walk_choice``), walked and accounted here from
  ``sys._current_frames``; both give the same tables. It runs only when it holds the GIL, so a thread running pure
  Python is read at GIL switch points. Each sample is charged the interval since that thread's previous one
  (capped at ``MAX_PERIODS`` periods: a longer gap is the recorder's own pause, a store write) and the CPU
  time the thread used in it (its CPU clock, ``thread_cpu_ns``). A thread whose CPU clock has not moved has
  not run: its previous stack is repeated without a walk, charged the whole time since;
- ``sample_frame()``: one thread's stack from inside it (the C walk from the frame: ``Walker.walk``), with the
  weights its caller computed: the main
  thread's timer signal handlers (``stepscope.record.sampling.signals``) charge each wall-clock timer expiration
  one period and each CPU-clock timer sample the CPU time since the previous one.

No frame object outlives a call: only code objects are kept, as cache keys, so tensors held in locals are
freed as usual. Stacks deeper than ``max_depth`` keep the ``max_depth`` frames nearest the leaf. Frames of
stepscope's own launcher, probes, wrappers, import hook and signal handler are left out (``HIDDEN_FILES``).
Pending samples are kept in ``array('q')`` columns: 40 bytes a sample.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from array import array
from time import perf_counter_ns

from .. import native as _native
from .stacktables import HIDDEN_FILES, StackTables

#: Threads of stepscope's own (recorder, clock markers): never sampled.
OWN_THREADS: set[int] = set()

#: A sample read from another thread is charged at most this many periods (see the module docstring).
MAX_PERIODS = 3

#: threads' runs between waits that use less than 1/IDLE_SHARE of a CPU count as idle (``Sampler.idle``; the resting
#: main thread's slack refills at that share), within an allowance of at most IDLE_CAP_NS (ns of CPU): the
#: C walker's IDLE_SHARE and IDLE_CAP_NS (walker.h)
IDLE_SHARE = 100
IDLE_CAP_NS = 1_000_000

_LINUX = sys.platform.startswith("linux")


def thread_cpu_ns(native_id: int) -> int:
    """CPU time (ns) used so far by the thread with OS id ``native_id`` of this process; -1 when unknown.

    Linux: the thread's ``CLOCK_THREAD_CPUTIME_ID``-style clock, ``MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)``
    (include/linux/posix-timers.h), read with ``clock_gettime``; a thread that is gone gives -1, never an error.
    """
    if not _LINUX or not native_id:
        return -1
    try:
        return time.clock_gettime_ns(((~native_id) << 3) | 6)
    except OSError:
        return -1


def walk_choice() -> tuple[str, str | None]:
    """How ``Sampler.sample`` reads the other threads' stacks: ``("c", None)``, the C walk (``native.ext.Walker``), or
    ``("python", why not)``: ``STEPSCOPE_SAMPLER=python``, a free-threaded build (the extension needs the GIL), the
    extension not in use (``STEPSCOPE_RECORDER=python``, not built, cannot load), or an interpreter whose frames it does
    not know (it reads CPython 3.11 to 3.13's)."""
    if os.environ.get("STEPSCOPE_SAMPLER", "").strip().lower() == "python":
        return "python", "STEPSCOPE_SAMPLER=python"
    import sysconfig

    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "python", "a free-threaded build: the C stack walk needs the GIL"
    if _native.ext is None:
        return "python", "the C extension is not in use (record.native)"
    if not hasattr(_native.ext, "Walker"):
        return "python", f"no C stack walk for Python {sys.version_info[0]}.{sys.version_info[1]}"
    return "c", None


class Sampler(StackTables):
    """Collects samples into append-only tables; ``drain()`` hands over what is new since the last call.

    ``period_ns``: the nominal sampling period (ns), charged to a thread's first sample and the unit of the cap.
    ``walk``: how ``sample()`` reads stacks, "c" or "python" (None: ``walk_choice()``; "c" where it is not
    available raises RuntimeError). ``walk`` and ``walk_note`` say which, and why not the C walk.
    """

    def __init__(self, max_depth: int = 256, period_ns: int = 9_900_990, walk: str | None = None) -> None:
        self.max_depth = max_depth
        self.period_ns = int(period_ns)
        #: serialises the two drivers (recorder thread, main thread's signal handler) and ``drain``
        self.lock = threading.Lock()
        self._frame_index: dict[tuple, int] = {}  # (id(code), last instruction) -> frame index, -1 if hidden
        self._alive: dict[int, object] = {}  # id(code) -> code: keeps the ids in _frame_index unique
        self._line_index: dict[tuple, int] = {}  # (id(code), line) -> frame index
        self._next_frame = 0
        self._code_info: dict = {}
        self._stack_index: dict[tuple, int] = {}
        self._new_frames: list[tuple] = []  # (function, module, file, line)
        self._new_stacks: list[tuple] = []  # root-first tuples of frame indices
        self._cols = self._new_cols()  # t_ns, thread_id, stack, wall_ns, cpu_ns
        #: thread id -> (t_ns, cpu_ns, stack index) of its previous sample (by ``sample``)
        self._last: dict[int, tuple[int, int, int]] = {}
        self._native: dict[int, int] = {}  # thread id -> OS thread id
        self.sample_count = 0
        self._truncated = 0
        choice, self.walk_note = walk_choice()
        if walk == "c" and choice != "c":
            raise RuntimeError(f"no C stack walk: {self.walk_note}")
        #: the C walk, or None (``sample()`` walks ``sys._current_frames()`` here)
        self._walker = _native.ext.Walker(max_depth, HIDDEN_FILES) if (walk or choice) == "c" else None
        self.walk = "c" if self._walker is not None else "python"
        if self._walker is not None:
            self.walk_note = None
        self._walk_frames: list[int] = []  # the walker's frame index -> frame index here
        self._walk_stacks: list[int] = []  # the walker's stack index -> stack index here
        #: the thread ids of the last ``sample()`` (the recorder notices an id reused by a new thread)
        self.last_threads: list[int] = []
        #: the thread ids whose stacks the last ``sample()`` walked (they had run since their previous sample)
        self.ran: list[int] = []
        #: how many threads the last ``sample()`` walked within their slack (moved, but not in ``ran``)
        self.moved = 0
        #: thread id -> CPU ns it may still use before it counts as run (``hand_over``: a resting main thread, whose
        #: own signal returns and wake-ups cost a little CPU): walked whenever its CPU clock moves (its stack may have
        #: changed: a wait, a few us of Python, another wait), listed in ``ran`` once it has used more than that
        self.slack: dict[int, int] = {}
        #: the stack index of the last recorded sample (``_record``)
        self.last_stack = -1
        self._n_active = -1  # len(threading._active) at the last ``sample()``
        self._still_t = 0  # when ``unmoved()`` last found every thread still (perf_counter_ns)
        self._used = 0  # the CPU (ns) the last ``sample()``'s walked threads used since their previous rows (-1: unknown)
        self._idle_tokens = 0  # ``idle()``'s allowance (ns of CPU), refilled at ``_idle_t``
        self._idle_t = 0
        self.slack_cap: dict[int, int] = {}  # each thread's slack at the hand-over: the most it refills to

    @property
    def truncated(self) -> int:
        """Stacks read that were deeper than ``max_depth`` (their root side left out)."""
        return self._truncated + (self._walker.truncated if self._walker is not None else 0)

    @property
    def remote_looks(self) -> tuple[int, int]:
        """(looks, threads missed): the C walk's looks that read a busy thread's stack without the GIL
        (record/native/remote.c), and the threads such a look could not read (then read with the GIL); (0, 0) for the
        Python walk."""
        w = self._walker
        return (w.remote_looks, w.remote_misses) if w is not None else (0, 0)

    @property
    def own_timers(self) -> tuple[int, int, int]:
        """(threads, samples, missed): busy threads given a timer of their own (record/native/ownclock.c:
        times one was armed), the samples their signal handlers took, and the signals whose handler could not read
        the stack (a code the walker did not hold yet, a full ring); (0, 0, 0) for the Python walk."""
        w = self._walker
        return (w.own_threads, w.own_samples, w.own_misses) if w is not None else (0, 0, 0)

    @property
    def own_ns(self) -> int:
        """The time (ns) the busy threads' own timers' signal handlers took so far, each signal's delivery counted
        too (``Walker.own_ns``); 0 for the Python walk."""
        w = self._walker
        return w.own_ns if w is not None else 0

    def own_period(self, period_ns: int) -> None:
        """Set the busy threads' own timers' period (ns; 0: the looks'; the overhead budget's, ``Budget``). Nothing
        for the Python walk."""
        if self._walker is not None:
            self._walker.own_period = period_ns

    def own_stop(self) -> None:
        """Delete the busy threads' own timers (samples of theirs not accounted yet are dropped: a thread's
        next sample is charged the time since its last): while a profiler of the program's runs, nothing is sampled.
        The looks arm them again. Nothing for the Python walk."""
        if self._walker is not None:
            self._walker.own_stop()

    def hand_on(self) -> None:
        """The session's end: the C walk's code objects held for the process's next walker (``Walker.reset(True)``),
        whose looks and busy threads' own timers read their frames from its first look, not after a miss each (a
        server's capture windows, one session after another). Nothing is sampled after; nothing for the Python walk."""
        if self._walker is not None:
            self._walker.reset(True)

    @staticmethod
    def _new_cols() -> tuple[array, ...]:
        return array("q"), array("q"), array("q"), array("q"), array("q")

    def restart(self, thread_id: int | None = None) -> None:
        """Forget the previous sample of ``thread_id`` (None: of every thread): its next sample is charged one
        period, not the time since (sampling was paused). Takes no lock (single dict operations): it is called
        on the way out, maybe from a signal handler that interrupted a sample in this very thread."""
        if self._walker is not None:
            self._walker.forget(thread_id, False)
        if thread_id is None:
            self._last.clear()
        else:
            self._last.pop(thread_id, None)

    def sample(self, exclude_thread: int | None = None, skip: frozenset | set | tuple = frozenset(),
               lazy: bool = False, busy: bool = False) -> int:
        """Sample every thread's stack once but the caller's (or ``exclude_thread``), ``skip`` and stepscope's
        own; returns the number of threads sampled.

        Each sample is charged the time since that thread's previous one, at most ``MAX_PERIODS`` periods, and the
        CPU time the thread used in it. A thread whose CPU clock has not moved since its previous sample has not run,
        so its stack is the one read then: it is not walked again, and is charged the whole time since (no cap: it
        was blocked there all along). ``lazy`` (a resting recorder's look; the C walk only, the Python walk records
        every look): a thread that has not run since the last look, or ran and is back at the stack of its last
        sample (an event loop's timer), gets no sample now; its next one is charged the time and CPU since.
        ``busy``: traced calls ended since the last look (the program works): a resting thread's slack (``hand_over``)
        does not refill at the idle share, so a step loop that mostly waits still wakes the main thread."""
        if not self.lock.acquire(timeout=1.0):
            return 0
        try:
            me = threading.get_ident() if exclude_thread is None else exclude_thread
            out = {me, *OWN_THREADS, *skip}  # not sampled
            last = self._last
            slack = self.slack
            walker = self._walker
            if walker is not None:  # the look and each thread's accounting in C (threads.c: the rules below)
                seen, ran, n = walker.sample(out, self.period_ns, MAX_PERIODS * self.period_ns, lazy, int(busy))
                if walker.unseen:
                    self._take_walked()
                self.last_threads = seen
                self.ran = ran
                self.moved = walker.moved
                self._n_active = len(threading._active)
                self.sample_count += n
                return n
            frames = sys._current_frames()
            t = perf_counter_ns()
            cap = MAX_PERIODS * self.period_ns
            n = 0
            ran = []
            moved = 0
            used = 0
            c = self._cols
            f = None
            for tid, f in frames.items():
                if tid in out:
                    continue
                native = self._native.get(tid)
                if native is None:
                    th = threading._active.get(tid)
                    native = self._native[tid] = getattr(th, "native_id", None) or 0
                cpu = thread_cpu_ns(native)
                prev = last.get(tid)
                n += 1
                if prev is not None and cpu >= 0 and cpu == prev[1]:
                    last[tid] = (t, prev[1], prev[2])  # blocked since: the same stack
                    c[0].append(t)
                    c[1].append(tid)
                    c[2].append(prev[2])
                    c[3].append(t - prev[0])
                    c[4].append(0)
                    continue
                if prev is None or cpu < 0 or prev[1] < 0 or cpu < prev[1]:
                    used = -1
                elif used >= 0:
                    used += cpu - prev[1]
                if not busy and prev is not None and slack.get(tid, -1) >= 0 and tid in self.slack_cap:  # (IDLE_SHARE)
                    more = (t - prev[0]) // IDLE_SHARE
                    slack[tid] = min(max(self.slack_cap[tid], more), slack[tid] + more)
                if prev is not None and cpu >= 0 and prev[1] >= 0 and 0 < cpu - prev[1] <= slack.get(tid, -1):
                    slack[tid] -= cpu - prev[1]  # (the resting main thread: walked, not woken, until its slack is used)
                    moved += 1
                else:
                    ran.append(tid)
                if prev is None:  # its CPU time so far stands for its last period (a thread started waiting: ~0)
                    wall, used = self.period_ns, min(cpu, self.period_ns) if cpu >= 0 else -1
                else:
                    gap = t - prev[0]
                    wall = min(gap, cap)
                    used = min(cpu - prev[1], wall) if cpu >= 0 and prev[1] >= 0 else -1
                    if gap > cap and 0 <= cpu - prev[1] < gap // 2:
                        # it waited most of the gap (the recorder looked rarely while every thread waited), then ran:
                        # the wait is charged at its previous stack, the run (at least its CPU time) at this one
                        run = min(gap, max(cpu - prev[1], self.period_ns))
                        woke = _native.ext.last_call_wake() if _native.ext is not None else None
                        if woke is not None and woke[1] == tid and prev[0] < woke[0] < t:  # it started a span
                            run = max(run, t - woke[0])  # then, which woke a resting recorder: it ran from then on
                        c[0].append(t - run)
                        c[1].append(tid)
                        c[2].append(prev[2])
                        c[3].append(gap - run)
                        c[4].append(0)
                        wall, used = run, cpu - prev[1]
                last[tid] = (t, cpu, self._record(f, tid, t, wall, used))
            for gone in [tid for tid in last if tid not in frames]:  # threads that ended (an id may come back
                prev = last.pop(gone)                                 # for a new thread: its OS id is read anew)
                self._native.pop(gone, None)
                if self._still_t > prev[0]:  # (found still since without a row: charged until then)
                    c[0].append(self._still_t)
                    c[1].append(gone)
                    c[2].append(prev[2])
                    c[3].append(self._still_t - prev[0])
                    c[4].append(0)
            self.last_threads = list(frames)
            self.ran = ran
            self.moved = moved
            self._used = used
            self._n_active = len(threading._active)
            del frames, f
            self.sample_count += n
            return n
        finally:
            self.lock.release()

    def run_looks(self, lock, skip: set, next_t: int, until_ns: int, main_ident: int, main_state, stop_fd: int,
                  stop_sigs: bytes, finished, limit: int, mem, mem_every: int, quiet: int = 0,
                  quiet_ns: int = 1) -> tuple[int, int, int, int, bytes, int]:
        """The recorder's looks in one C call (``Walker.run``, record/native/looks.c; the C walk only): wait for each
        look without the GIL (``notify`` ends the wait; ``lock`` released ends the run), read the threads' CPU clocks
        still without it, take the GIL for the look alone (``sample``'s, every thread but ``skip``, and but the main
        thread ``main_ident`` while ``main_state``, its timer sampler's state, says its own timers sample it: read at
        each look) and the memory lane's RSS (``mem``, a ``MemoryLane``, when its ``last_t`` is ``mem_every`` ns
        old), from ``next_t`` on every ``period_ns``, until ``until_ns`` or anything else is due (the reasons:
        looks.c; looks in a row where no thread ran covering ``quiet_ns``, counting from ``quiet`` ns, is one). Returns
        ``(reason, looks, next_t, look_cpu_ns, stop_bytes, quiet)``; the last look's threads are ``last_threads`` and
        ``ran``, as after ``sample``."""
        from ..memory.history import PAGE

        rss_fd = mem.rss.fd if mem is not None else -1
        got = self._walker.run(
            lock, self.lock, skip, self.period_ns, MAX_PERIODS * self.period_ns, next_t, until_ns, main_ident,
            main_state, threading._active, stop_fd, stop_sigs, finished, limit, mem if rss_fd >= 0 else None, rss_fd,
            PAGE, mem_every, quiet, quiet_ns)
        looks = got[1]  # (reason, looks, threads looked at, next_t, seen, ran, look CPU, stop bytes)
        if looks:
            self.last_threads, self.ran, self.moved = got[4], got[5], self._walker.moved
            self._n_active = len(threading._active)
            self.sample_count += got[2]
        return got[0], looks, got[3], got[6], got[7], got[8]

    def run_lane(self, lock, until_ns: int, mem, period_ns: int, stop_fd: int, stop_sigs: bytes, finished,
                 limit: int) -> tuple[int, int, bytes]:
        """The memory lane alone while sampling is off, in one C call (``Walker.lane``, record/native/looks.c; the C
        walk only): the RSS rows of ``mem`` (a ``MemoryLane`` with its statm open) read every ``period_ns`` ns from
        its ``last_t`` without the GIL, kept until ``until_ns`` or anything else is due, then appended to the lane in
        one hold of the GIL. Returns ``(reason, rows, stop_bytes)`` (the reasons: looks.c)."""
        from ..memory.history import PAGE

        return self._walker.lane(lock, until_ns, mem, mem.rss.fd, PAGE, period_ns, stop_fd, stop_sigs, finished, limit)

    def notify(self) -> None:
        """Wake a ``run_looks`` that waits for its next look (any thread; nothing without the C walk)."""
        if self._walker is not None:
            self._walker.notify()

    def sample_blocked(self, skip: frozenset | set | tuple = frozenset()) -> bool:
        """When no thread that ``sample()`` read before has run since (their CPU clocks, one system call each) and
        no thread came or went: record each one's previous stack again, unwalked, charged the time since, and
        return True. Otherwise record nothing and return False (``sample()`` is due). Lets the recorder look at
        every period at little cost while the other threads wait (a progress bar's monitor, idle request
        handlers), with every sample still at its own time."""
        if len(threading._active) != self._n_active:
            return False
        if self._walker is not None:  # (threads.c)
            if not self.lock.acquire(timeout=1.0):
                return True
            try:
                n = self._walker.blocked(skip)
                if n >= 0:
                    self.sample_count += n
                return n >= 0
            finally:
                self.lock.release()
        native = self._native
        last = self._last
        now = []
        for tid, prev in list(last.items()):
            if tid in skip:
                continue
            cpu = thread_cpu_ns(native.get(tid, 0))
            if cpu < 0 or cpu != prev[1]:  # (moved at all, within a slack too: its stack is read again)
                return False
            now.append((tid, prev))
        if not self.lock.acquire(timeout=1.0):
            return True
        try:
            t = perf_counter_ns()
            c = self._cols
            for tid, prev in now:
                last[tid] = (t, prev[1], prev[2])
                c[0].append(t)
                c[1].append(tid)
                c[2].append(prev[2])
                c[3].append(t - prev[0])
                c[4].append(0)
            self.sample_count += len(now)
        finally:
            self.lock.release()
        return True

    def unmoved(self) -> bool:
        """True when no thread that ``sample()`` read before has run since (their CPU clocks, one system call each)
        and no thread came or went; nothing is recorded either way (a resting recorder's look, ``recorderloop``:
        each thread's next sample is charged the whole time since its previous one, at the stack it still had)."""
        if len(threading._active) != self._n_active:
            return False
        if self._walker is not None:  # (threads.c)
            return self._walker.unmoved(()) >= 0
        native = self._native
        for tid, prev in list(self._last.items()):
            cpu = thread_cpu_ns(native.get(tid, 0))
            if cpu < 0 or cpu != prev[1]:
                return False
        self._still_t = perf_counter_ns()  # (each was at its stack until now: one that ends is charged so far)
        return True

    def rows_waiting(self) -> bool:
        """Whether samples wait to be handed over (``drain``)."""
        return self._walker.n_rows > 0 if self._walker is not None else len(self._cols[0]) > 0

    def idle(self, t_ns: int, busy: bool = False) -> bool:
        """Whether the last ``sample()`` counts as idle at ``t_ns``: no thread ran or moved, or what the threads it
        walked used since their previous rows is within an allowance of CPU time that refills at ``1/IDLE_SHARE``
        of the time passed, up to ``IDLE_CAP_NS`` or that share of the time since the previous call if more (looks
        far apart while the recorder rests) (an event loop's timer, a heartbeat: runs of a few us to a ms
        between waits; never a step's 5-100% of a CPU). Spends it; once it does not cover a look, it is emptied.
        ``busy``: traced calls ended since the last look (the program works, however little CPU it uses: a step
        loop that waits): threads that ran then never count as idle. (threads.c ``walker_idle_spend``.)"""
        ran = bool(self.ran or self.moved)
        if self._walker is not None:
            return self._walker.idle(t_ns, ran, busy)
        used = (-1 if busy else self._used) if ran else 0
        if self._idle_t > 0 and t_ns > self._idle_t:
            more = (t_ns - self._idle_t) // IDLE_SHARE
            self._idle_tokens = min(max(IDLE_CAP_NS, more), self._idle_tokens + more)
        self._idle_t = max(self._idle_t, t_ns)
        if used < 0 or used > self._idle_tokens:
            self._idle_tokens = 0
            return False
        self._idle_tokens -= used
        return True

    def hand_over(self, thread_id: int, t_ns: int, cpu_ns: int, slack: int = 0) -> None:
        """From now on ``sample()`` reads ``thread_id`` too (the main thread, resting: ``signals.MainThreadSampler.rest``):
        its previous sample is the last one its own handler recorded (``last_stack``, at ``t_ns``, its CPU clock then
        ``cpu_ns``), so the time from there is charged at that stack while it waits; ``slack``: CPU ns it may use
        meanwhile before it is listed in ``ran`` (its stack is read again whenever its CPU clock moves)."""
        with self.lock:
            if self._walker is not None:  # (threads.c; the signal handler's stacks are the walker's: ``last_walk``)
                main = threading.main_thread()
                self._walker.hand_over(thread_id, main.native_id if thread_id == main.ident else 0, t_ns, cpu_ns,
                                       self._walker.last_walk, slack)
                return
            if self.last_stack >= 0:
                self._last[thread_id] = (t_ns, cpu_ns, self.last_stack)
            else:
                self._last.pop(thread_id, None)
            self._native.setdefault(thread_id, threading.main_thread().native_id
                                    if thread_id == threading.main_thread().ident else 0)
            self.slack[thread_id] = slack
            self.slack_cap[thread_id] = slack

    def take_back(self, thread_id: int, frame=None, t_ns: int = 0, cpu_ns: int = -1) -> None:
        """``sample()`` stops reading ``thread_id`` (its own handler samples it again). With ``frame`` (called from inside
        that thread, at ``t_ns`` with its CPU clock at ``cpu_ns``): the time since its last sample is charged now,
        the wait at the previous stack and the run (its CPU time since, at least) at ``frame``'s stack."""
        if not self.lock.acquire(False):  # (a signal handler inside a sample of this thread: nothing to charge)
            self.slack.pop(thread_id, None)
            self.slack_cap.pop(thread_id, None)
            self._last.pop(thread_id, None)
            if self._walker is not None:
                self._walker.forget(thread_id)
            return
        try:
            self.slack.pop(thread_id, None)
            self.slack_cap.pop(thread_id, None)
            prev = self._last.pop(thread_id, None)
            if self._walker is not None:  # (threads.c: its stack is the walker's)
                prev = self._walker.forget(thread_id)
                if prev is not None:
                    if self._walker.unseen:
                        self._take_walked()
                    prev = (prev[0], prev[1], self._walk_stacks[prev[2]])
            if frame is None or prev is None:
                return
            gap = t_ns - prev[0]
            used = cpu_ns - prev[1] if cpu_ns >= 0 and prev[1] >= 0 else -1
            if gap <= 0:
                return
            run = min(gap, max(used, 0)) if used >= 0 else min(gap, self.period_ns)
            if gap - run > 0:
                c = self._cols
                c[0].append(t_ns - run)
                c[1].append(thread_id)
                c[2].append(prev[2])
                c[3].append(gap - run)
                c[4].append(0)
            if run > 0:
                self._record(frame, thread_id, t_ns, run, 0)
        finally:
            self.lock.release()

    def sample_frame(self, frame, thread_id: int, t_ns: int, wall_ns: int, cpu_ns: int) -> bool:
        """Record ``frame``'s stack (leaf first through ``f_back``) as a sample of ``thread_id`` read at
        ``t_ns``, standing for ``wall_ns`` of wall time and ``cpu_ns`` of CPU time (the caller's accounting, see
        ``sampling.signals``). Called from inside that thread; False (nothing recorded) when the tables are busy
        (``sample``/``drain`` in the thread it interrupted)."""
        if not self.lock.acquire(False):
            return False
        try:
            self._record(frame, thread_id, t_ns, wall_ns, cpu_ns)
            self.sample_count += 1
            return True
        finally:
            self.lock.release()

    def drain(self) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """Return and forget ``(new_frames, new_stacks, samples)`` recorded since the last drain; samples as
        ``(t_ns, thread_id, stack, wall_ns, cpu_ns)`` tuples.

        Frame and stack indices continue across drains (the tables are append-only). When the lock cannot be had
        within a second, the tables are taken without it: that is a signal handler (the program's SIGTERM, say)
        running inside a sample of this same thread, whose half-written row is then dropped (columns are zipped
        to the shortest), instead of a deadlock.
        """
        locked = self.lock.acquire(timeout=1.0)
        try:
            rows = []
            if self._walker is not None:  # the C accounting's samples (threads.c), their stacks made these tables'
                raw = self._walker.rows()  # (first: the C signal handler may add rows, and stacks, at any line here)
                if self._walker.unseen:
                    self._take_walked()
                ws = self._walk_stacks
                rows = [(t, tid, ws[si], wall, cpu) for t, tid, si, wall, cpu in raw]
            frames, self._new_frames = self._new_frames, []
            stacks, self._new_stacks = self._new_stacks, []
            cols, self._cols = self._cols, self._new_cols()
        finally:
            if locked:
                self.lock.release()
        return frames, stacks, rows + list(zip(*cols))


#: signals that end or interrupt a program: a thread of stepscope's blocks them, so that the kernel hands one sent to
#: the process to a thread of the program's (the main thread, as without stepscope): one taken by a thread of ours
#: would leave a main thread blocked in a C call (``sem_wait``, ``lock.acquire``) waiting forever for its handler
STOP_SIGNALS = frozenset(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
                         if hasattr(signal, n))


def start_thread(th) -> None:
    """Start stepscope's thread ``th`` (a ``threading.Thread``) with ``STOP_SIGNALS`` blocked from its first
    instruction: the calling thread blocks them around ``start`` (a new thread inherits its creator's mask), so no
    such signal can land in the new thread before it blocks them itself (``keep_signals_off_this_thread``); one
    sent meanwhile waits, pending, for the calling thread."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    except (AttributeError, OSError, ValueError):
        th.start()
        return
    try:
        th.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def keep_signals_off_this_thread() -> None:
    """Block ``STOP_SIGNALS`` in the calling thread (one of stepscope's); never raises."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    except (AttributeError, OSError, ValueError):
        pass


def start_ticker(name: str, every_s: float, tick) -> tuple[threading.Event, threading.Thread]:
    """A daemon thread of stepscope's (``OWN_THREADS``, stop signals blocked: ``start_thread``) named ``name`` that
    calls ``tick()`` every ``every_s`` seconds until the returned event is set or ``tick`` raises; returns the event
    and the thread (for a bounded ``join``)."""
    stop = threading.Event()

    def loop() -> None:
        keep_signals_off_this_thread()
        OWN_THREADS.add(threading.get_ident())
        while not stop.wait(every_s):
            try:
                tick()
            except Exception:
                return

    th = threading.Thread(target=loop, name=name, daemon=True)
    start_thread(th)
    return stop, th
