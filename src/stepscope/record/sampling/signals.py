"""The main thread's sampler: a wall-clock timer signal read inside the thread (Linux, CPython).

Why: a sampler *thread* reads the main thread's stack only when it gets the GIL, that is when the main thread releases
it (a sleep, I/O, a GIL-releasing C call) or after the 5 ms switch interval, so the Python time before a release is
charged to whatever releases the GIL next (a 2.5 ms Python burst before a sleep read as 0 %).

How: a POSIX timer (``sampling.timer``) sends a real-time signal to the main thread every period of wall time. CPython's
C handler only flags it; the Python handler below runs at the thread's next safe point, which is within microseconds in
Python code, at once in ``time.sleep``/lock waits/``select`` (they wake on the signal, run handlers, and go on waiting:
PEP 475), and right after a C call that held the thread. In each case the stack it reads is the one the thread had at
the expiration (a C call shows as the Python line that called it). The expirations follow a schedule independent of the
program: blocks of ``BLOCK`` expirations, each block at an interval drawn uniform in 0.5 to 1.5 periods (a private
``random.Random``; the program's random state is untouched), so samples never run in lockstep with periodic work (a 3.3
ms loop read every 9.9 ms always lands on the same phase); the kernel timer is periodic within a block and re-armed, at
the absolute time of the pending expiration, once a block (the C call costs ~30 us of a cold cache between samples: once
a sample it was half the handler's cost). Each sample is charged the waits of every scheduled expiration up to it: more
than one when the thread was held in one place (a C call, or descheduled), and they are that place's. Because the
schedule never depends on the program, each expiration is an unbiased look at where the thread was, and the charges add
up to the wall time. (Charging the *time since the previous sample*, or re-arming from the handler's own time, is
biased: the sample that ends a C call would also take the Python time before the call.)

CPU time: a second timer on the main thread's CPU clock expires only while the thread runs (the kernel checks it at its
scheduler tick; its period is two wall periods and never under 10 ms: at most 100 samples a CPU second); each of its
samples is charged the thread's CPU time since the previous one. Wall-timer samples carry wall time and no CPU time,
CPU-timer samples CPU time and no wall time, so the flame graph shows either, unbiased.

The handlers are installed with ``SA_RESTART`` (``signal.siginterrupt(sig, False)``) and only the main thread is
signalled: other threads never see EINTR.

Limits (docs/sampling.md): Linux only; the signal handler can only be installed from the main thread (a session started
elsewhere, as a ``capture`` window of a program started without ``--server``, samples with the thread sampler); a
program that installs its own handler for the signal, or starts its own tracer or profiler
(``sys.settrace``/``setprofile``, cProfile, a debugger, coverage: they would see the handler's calls), makes stepscope
pause: at the next tick the timers are disarmed; on 3.12+ nothing is sampled until the program's profiler is gone (then
sampling resumes), on 3.11 the main thread goes back to the thread sampler.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from .. import native as _native
from ..spans.buffer import current_span as _current_span, finished as _finished
from .cpuwake import other_tools
from .sampler import IDLE_SHARE, Sampler
from . import timer
from .timer import ThreadTimer

#: The real-time signals used, counted down from SIGRTMAX (the first two free ones are taken: wall, CPU).
CANDIDATES = (3, 4, 5, 6, 7, 8)

#: Wall-timer expirations a block: the kernel timer is periodic within a block, and each block's interval is
#: drawn anew (uniform in 0.5 to 1.5 periods), so the schedule never runs in lockstep with the program's own
#: periodic work while the timer is re-armed (a C call, ~2 us hot, ~30 us cold between samples) once a block.
BLOCK = 8

#: The CPU-clock timer's period: this many wall periods, and never under ``CPU_PERIOD_MIN_NS`` (the kernel checks
#: CPU timers at its tick anyway). Half the wall rate resolves the CPU view (50 samples a CPU second at the
#: default 101 Hz, ``settings.DEFAULT_HZ``) at half the handler calls: a sample costs ~40-70 us of a cold cache
#: in a real pipeline.
CPU_PERIODS = 2
CPU_PERIOD_MIN_NS = 10_000_000

#: The memory lane is read at a wall tick at most this often (ns): memory needs no 1000 Hz resolution, and a reading
#: cost about as much as a sample (measured at --hz 1000: the handler's time doubled with a reading every tick).
MEMORY_PERIOD_MIN_NS = 9_000_000

#: Rest: after wall ticks covering this long (ns; at least 10 ticks) in a row at which the main thread had used under
#: ``REST_CPU_NS`` of CPU since the previous one (it waits: an event loop between requests), the wall timer is
#: disarmed and the recorder thread samples the main thread from outside (``MainThreadSampler.rest``) until it runs
#: again: each tick is a wake-up of a waiting thread (~45 us of CPU at 101 Hz here, whatever the handler). The
#: recorder samples it at the full rate until nothing ran for a second: ``explain`` still times a wait in a step.
REST_NS = 200_000_000
#: (a waiting thread's tick costs its handler plus the signal's wake-up: 150-220 us of CPU measured on a 2-core VM,
#: where 200 us let a waiting thread rest only now and then; a quarter of the period at most, so that at high rates a
#: thread that runs between ticks is never taken for a waiting one)
REST_CPU_NS = 600_000


def rest_cpu_ns(period_ns: int) -> int:
    """The CPU (ns) a tick of a waiting main thread may use at the period ``period_ns`` (see ``REST_CPU_NS``)."""
    return min(REST_CPU_NS, max(period_ns // 4, 200_000))
#: While the main thread rests, the recorder wakes it up once it used this much CPU (ns) since it began resting.
WAKE_CPU_NS = 1_000_000

_installed: list[int] = []  # [wall signal, CPU signal] with the handler installed (process-wide)
_active: "MainThreadSampler | None" = None
_busy = False


_gettrace, _getprofile = sys.gettrace, sys.getprofile
_get_tool = sys.monitoring.get_tool if hasattr(sys, "monitoring") else None


def _handler(signum, frame) -> None:
    # Kept flat: a program's own profiler that starts meanwhile sees this call (and the C functions it calls)
    # once, and nothing else: the pause is finished by the recorder thread (``MainThreadSampler.check``).
    global _busy
    s = _active
    if s is None or not s.active or s.pid != os.getpid():
        return
    if _busy or frame is None:  # the wall timer is one-shot: a tick that cannot sample must still re-arm it
        if signum == s.signum:
            s.missed = True
        return
    _busy = True  # a signal that comes while this runs is not handled inside it
    try:
        other = _gettrace() is not None or _getprofile() is not None
        if not other and _get_tool is not None:
            for i in _TOOL_IDS:
                name = _get_tool(i)
                if name is not None and name != "stepscope":
                    other = True
                    break
        if other:
            s.active = False
            s.paused = True
            for t in s._timers:
                fn, args = t.disarm_call
                fn(*args)
            return
        if signum == s.signum:
            if s.resting:  # an expiration that was pending when the timer was disarmed
                return
            s.current = _span_now()  # the open span now (the recorder writes it: the span a killed run died in)
            s.tick(frame)
            if s.memory is not None:  # the memory lane (``memory.history``): ~10 us, at most ~100 times a second
                tm = time.perf_counter_ns()
                if tm - s.memory.last_t >= MEMORY_PERIOD_MIN_NS:
                    s.memory.sample(tm)
        else:
            t = time.perf_counter_ns()
            cpu = time.thread_time_ns()
            used = cpu - s.cpu_last
            idle = s.resting and s.cpu_last_t > 0 and used * IDLE_SHARE <= t - s.cpu_last_t
            s.cpu_last, s.cpu_last_t = cpu, t
            if idle:
                pass  # resting, its CPU period used at under the idle share of a CPU (an event loop's timer): the
                # recorder's looks charge it
            else:
                if used > 0:
                    s.sampler.sample_frame(frame, s.thread_id, t, 0, used)
                if s.resting:  # it runs again: the wall timer back, the wait since the recorder's last look charged
                    s.wake(frame, t)
        while s.missed and s.active:  # a wall tick came while this ran: it is this stack's too
            s.missed = False
            s.tick(frame)
    finally:
        _busy = False


_TOOL_IDS = range(6)
_span_now = _current_span.get

#: the C handler (``_native.tick``, record/native/sigtick.c): installed for both signals wherever the extension has it;
#: it serves the active ``_native.Tick`` (a sampler reading stacks with the C walk) and calls ``_handler`` otherwise
_c_tick = getattr(_native.ext, "tick", None) if _native.ext is not None else None
#: the handler installed for the two signals (compared by identity: ``check``, ``forked``)
HANDLER = _c_tick if _c_tick is not None else _handler
#: a thread's own setprofile/settrace (by ident), read from C (``_native.thread_hooked``); unseen without the extension
_thread_hooked = getattr(_native.ext, "thread_hooked", None) or (lambda ident: False)

#: the fields of the main thread's sampling state (``MainThreadSampler.st``): a ``_native.Tick`` when the C handler
#: samples, else a ``_PyState``; ``MainThreadSampler`` reads and writes them as its own attributes
STATE_FIELDS = ("active", "resting", "missed", "due", "waited", "interval", "left", "carry", "period_ns", "rest_cpu",
                "tick_t", "tick_cpu", "tick_cpu_q", "quiet_ticks", "quiet_cpu", "cpu_last", "cpu_last_t", "current",
                "memory")


class _PyState:
    """The sampling state in Python (the handler ``_handler``), as ``_native.Tick`` keeps it in C: see
    ``MainThreadSampler`` for each field."""

    __slots__ = STATE_FIELDS

    def __init__(self) -> None:
        self.active = self.resting = self.missed = False
        self.due = self.waited = self.carry = self.left = self.cpu_last = self.cpu_last_t = 0
        self.interval = self.period_ns = 1
        self.rest_cpu = REST_CPU_NS
        self.tick_t, self.tick_cpu, self.tick_cpu_q = 0, -1, -1
        self.quiet_ticks = self.quiet_cpu = 0
        self.current = self.memory = None


def _state_field(name: str) -> property:
    return property(lambda self: getattr(self.st, name), lambda self, v: setattr(self.st, name, v),
                    doc=f"``st.{name}``")


class MainThreadSampler:
    """Samples the main thread by timer signals into ``sampler``. ``start(period_ns)`` from the main thread
    (installs the handlers) or, once installed, from any thread; ``stop()`` from any thread.

    ``active``: sampling now. ``note``: why it is not (or stopped), for the run's record. ``signum``: the wall
    timer's signal (None: never started); ``period_ns``: the mean period; ``due``/``waited``: the wall timer's
    pending expiration and the wait it ends (ns); ``cpu_last``: the main thread's CPU time at the last
    CPU-timer sample, ``cpu_last_t`` when (a resting main thread whose CPU period took over ``IDLE_SHARE`` times as
    long in wall time stays resting: an event loop's timer).
    """

    def tick(self, frame) -> None:
        """A wall-timer expiration: charge ``frame``'s stack the waits of every scheduled expiration up to now
        (more than one when the thread was held in one place: a C call, or descheduled). The kernel timer runs
        periodically through a block of ``BLOCK`` expirations; at the end of one the next block's interval is
        drawn and the timer re-armed from the pending expiration (one C call per block, not per sample)."""
        t = time.perf_counter_ns()
        due = self.due
        if due > t:  # a spurious tick (a re-arm raced an expiration): nothing scheduled has passed
            return
        wall = self.carry
        interval = self.interval
        n = self.left
        while due <= t:  # the kernel's own schedule: every expiration so far was at the block's interval
            wall += self.waited
            self.waited = interval
            due += interval
            n -= 1
        self.due = due
        if n <= 0:  # the block is over: the pending expiration stays, the waits after it are drawn anew
            self.interval = self.draw()
            n = BLOCK
            self.wall_timer.arm_at(due, self.interval)
        self.left = n
        self.carry = 0 if self.sampler.sample_frame(frame, self.thread_id, t, wall, 0) else wall
        cpu = time.thread_time_ns()
        # waiting: over the ticks since the quiet stretch began, the thread used under REST_CPU_NS a tick on average
        # (each tick's own handler counts: one slow tick, a cold cache or a busy host, does not end the stretch; a
        # thread that runs between ticks does)
        if self.tick_cpu_q >= 0 and self.quiet_cpu + cpu - self.tick_cpu_q < (self.quiet_ticks + 1) * self.rest_cpu:
            self.quiet_ticks += 1
            self.quiet_cpu += cpu - self.tick_cpu_q
            if self.quiet_ticks >= max(10, REST_NS // max(self.period_ns, 1)) and self.carry == 0:
                self.rest(t, cpu)
        else:
            self.quiet_ticks = self.quiet_cpu = 0
        self.tick_cpu_q = self.tick_cpu = cpu
        self.tick_t = t

    def rest(self, t_ns: int, cpu_ns: int) -> None:
        """The main thread has waited for ``REST_NS``: disarm the wall timer and hand the main thread to the
        recorder thread (``Sampler.hand_over``: its stack as of this tick, the time from here charged there while its
        CPU clock stands still). The CPU timer stays armed: the first CPU period it runs ends the rest (``wake``), as
        does the recorder seeing it use ``WAKE_CPU_NS``."""
        if not self.active or self.resting or self.wall_timer is None:
            return
        fn, args = self.wall_timer.disarm_call
        fn(*args)
        self.sampler.hand_over(self.thread_id, t_ns, cpu_ns, slack=WAKE_CPU_NS)
        self.resting = True  # (after the hand-over: a look that sees it resting never takes it for a new thread)
        self.rests += 1
        self.quiet_ticks = self.quiet_cpu = 0

    def _main_cpu(self) -> int:
        """The main thread's CPU time (ns; its CPU clock, readable from any thread), -1 where unknown."""
        try:
            return time.clock_gettime_ns(timer.thread_cpu_clock(self.native_id)) if self.native_id else -1
        except OSError:
            return -1

    def rest_if_blocked(self, t_ns: int) -> bool:
        """Recorder thread: rest the main thread from here when its handler has not run for ``REST_NS`` while its CPU
        clock barely moved (under 1% of the time: the ticks' own delivery). That is a wait which the kernel restarts
        after each tick without running Python's handler (an untimed lock wait: ``Thread.join()``, ``Event.wait()``
        with no timeout), so the thread never rests by itself and every tick still wakes it. Its stack is read here
        (``sys._current_frames``: it holds no GIL while blocked) and charged the time since its last handled tick; the
        recorder samples it from then on, as for a rest, until it runs again. A thread blocked before its first tick
        is charged from the timer's start (or its last wake). True when it rested it."""
        last = self.tick_t
        if not self.active or self.resting or self.wall_timer is None or last <= 0 or t_ns - last < REST_NS:
            return False
        before = self.tick_cpu
        cpu = self._main_cpu()
        if before < 0 or cpu < 0 or cpu - before > (t_ns - last) // 100:
            return False
        frame = sys._current_frames().get(self.thread_id)
        if frame is None or not self.rest_lock.acquire(False):
            return False
        try:
            if self.resting or not self.active or self.tick_t != last:
                return False
            self.resting = True  # (before the disarm, a foreign call: a tick that runs meanwhile sees it and returns)
            fn, args = self.wall_timer.disarm_call
            fn(*args)
            self.rests += 1
            self.blocked_rests += 1
            self.quiet_ticks = self.quiet_cpu = 0
            now = time.perf_counter_ns()
            self.sampler.sample_frame(frame, self.thread_id, now, max(now - last, 0), 0)
            self.sampler.hand_over(self.thread_id, now, cpu, slack=WAKE_CPU_NS)
            return True
        finally:
            self.rest_lock.release()
            del frame

    def wake(self, frame=None, t_ns: int | None = None) -> bool:
        """End a rest: re-arm the wall timer on a fresh schedule from now. From the main thread's CPU-timer handler
        (``frame``: its stack, charged the time since the recorder's last look, split into the wait at the old stack
        and the run at this one) or from the recorder thread (which has just sampled the main thread). False when
        the other side is ending it right now."""
        if not self.rest_lock.acquire(False):
            return False
        try:
            if not self.resting:
                return True
            self.resting = False  # (before the take-back: a look in between skips it, never takes it for a new one)
            if frame is not None:
                self.sampler.take_back(self.thread_id, frame, t_ns if t_ns is not None else time.perf_counter_ns(),
                                       time.thread_time_ns())
            else:
                self.sampler.take_back(self.thread_id)
            self.tick_cpu_q = -1
            if self.active and self.wall_timer is not None:
                delay = self.draw()
                self.waited, self.due = delay, time.perf_counter_ns() + delay
                self.interval, self.left, self.carry, self.missed = self.draw(), BLOCK, 0, False
                self.wall_timer.arm_at(self.due, self.interval)
                self.tick_t, self.tick_cpu = time.perf_counter_ns(), self._main_cpu()
            return True
        finally:
            self.rest_lock.release()

    def draw(self) -> int:
        """The next wait (ns): uniform in [0.5, 1.5) periods."""
        return int(self.period_ns * (0.5 + self._rng.random()))

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        #: the sampling state: C (``_native.Tick``, served by the C handler) when the sampler walks stacks in C
        self.st = _native.ext.Tick() if _c_tick is not None and sampler._walker is not None else _PyState()
        #: which handler samples: "c" (``_native.tick``) or "python" (``_handler``)
        self.handler = "python" if isinstance(self.st, _PyState) else "c"
        self.active = False
        self.note: str | None = None
        self.signum: int | None = None
        self.pid = os.getpid()
        self.thread_id = threading.main_thread().ident
        self.period_ns = 1
        self.rest_cpu = REST_CPU_NS
        self.due = 0  # when the wall timer's pending expiration is due (perf_counter_ns)
        self.waited = 0  # the length of the wait that ends then (ns)
        self.interval = 1  # the kernel timer's interval in the current block (ns)
        self.left = 0  # expirations left in the current block
        self.carry = 0  # wall time of a sample that could not be recorded, added to the next (ns)
        self.missed = False  # a wall tick came while the handler ran
        self.cpu_last = 0
        self.cpu_last_t = 0  # ... and when (perf_counter_ns; 0: none yet)
        #: the main thread's innermost open-span record at the last wall tick (``spans.buffer.current_span``)
        self.current = None
        #: the memory lane sampled at each wall tick (``memory.history.MemoryLane``), or None
        self.memory = None
        self.wall_timer: ThreadTimer | None = None
        import random

        self._rng = random.Random()
        self.paused = False
        self.resumable = False
        self.pauses = 0  # how often the program's own profiler paused it
        self._signums: list[int] = []
        self._timers: list[ThreadTimer] = []
        #: the wall timer is disarmed while the main thread waits (``rest``): the recorder samples it meanwhile
        self.resting = False
        #: held by the recorder while it samples a resting main thread, and by ``wake``
        self.rest_lock = threading.Lock()
        self.rests = 0  # times it rested
        self.blocked_rests = 0  # ... of which rested by the recorder (``rest_if_blocked``)
        #: when the main thread's time was last charged (its last wall tick, or the timer's start: ``perf_counter_ns``),
        #: and its CPU clock then (ns; -1: unknown): what ``rest_if_blocked`` charges from
        self.tick_t, self.tick_cpu = 0, -1
        self.native_id = threading.main_thread().native_id or 0
        self.quiet_ticks = self.quiet_cpu = 0
        self.tick_cpu_q = -1

    for _f in STATE_FIELDS:
        locals()[_f] = _state_field(_f)
    del _f

    @property
    def signums(self) -> tuple[int, ...]:
        """The signal numbers its timers use (wall, CPU), or () before ``start``."""
        return tuple(self._signums)

    def start(self, period_ns: int) -> bool:
        """Arm the timers; False (and ``note`` says why) where this cannot sample the main thread."""
        global _active
        if os.environ.get("STEPSCOPE_SAMPLER", "").strip().lower() == "thread":
            self.note = "STEPSCOPE_SAMPLER=thread"
            return False
        if not sys.platform.startswith("linux") or sys.implementation.name != "cpython":
            self.note = "the timer-signal sampler needs CPython on Linux"
            return False
        if _active is not None and _active is not self:
            self.note = "another stepscope session samples the main thread"
            return False
        signums = install()
        if signums is None:
            self.note = ("the signal handler can only be installed from the main thread" if
                         threading.current_thread() is not threading.main_thread() else
                         "no two free real-time signals (SIGRTMAX-3..-8 handled by the program)")
            return False
        self.signum = signums[0]
        self._signums = signums
        return self._arm(period_ns, signums)

    def _arm(self, period_ns: int, signums: list[int]) -> bool:
        global _active
        main = threading.main_thread()
        try:
            wall = ThreadTimer(signums[0], main.native_id)
            self._timers.append(wall)
            cpu = ThreadTimer(signums[1], main.native_id, timer.thread_cpu_clock(main.native_id))
            self._timers.append(cpu)
            self.period_ns = int(period_ns)
            self.rest_cpu = rest_cpu_ns(self.period_ns)
            self.cpu_last = sampler_cpu(main.native_id)
            self.cpu_last_t = time.perf_counter_ns()
            self.wall_timer = wall
            self.carry = 0
            _active = self
            if self.handler == "c":  # (record/native/sigtick.c: the C handler serves this state from now on)
                st = self.st
                st.bind(self, self.sampler._walker, self.thread_id, signums[0], signums[1], _current_span,
                        self._rng.getrandbits(64))
                st.set_timer(0, wall.timer_id)
                st.set_timer(1, cpu.timer_id)
                _native.ext.set_tick(st)
            delay = self.draw()
            self.waited, self.due = delay, time.perf_counter_ns() + delay
            self.interval, self.left = self.draw(), BLOCK
            wall.arm_at(self.due, self.interval)
            cpu.arm(max(CPU_PERIODS * int(period_ns), CPU_PERIOD_MIN_NS))
            self.tick_t, self.tick_cpu = time.perf_counter_ns(), self._main_cpu()
        except OSError as e:
            self._deactivate()
            self.note = f"no per-thread timer ({e})"
            self._close_timers()
            return False
        self.active = True
        return True

    def check(self) -> None:
        """From the recorder thread: stop when the program took a signal over (its own handler); finish a
        pause the handler began (``pause``), and resume once the program's own profiler is gone (3.12+, where
        that can be seen from another thread)."""
        if self.active and any(signal.getsignal(s) is not HANDLER for s in _installed):
            self.stop("the program installed its own handler for a sampling signal")
        elif self.paused and self._timers:
            self.pause()
        elif self.paused and self.resumable and not other_tools() and not _thread_hooked(self.thread_id):
            self.resume()

    def pause(self) -> None:
        """The program runs its own tracer or profiler, which would see the handler's calls: disarm until it is
        gone (``check``). On 3.12+ nothing samples meanwhile (``sampling_hidden``); on 3.11 the program's
        ``settrace``/``setprofile`` cannot be seen from another thread, so the main thread goes back to the thread
        sampler for the rest of the run."""
        self.paused = True
        self.active = False
        self.resting = False
        self.resumable = hasattr(sys, "monitoring")
        self.pauses += 1
        if not self.resumable and self.note is None:
            self.note = "the program started its own tracer or profiler"
        self._close_timers()
        self.sampler.restart(self.thread_id)

    def resume(self) -> None:
        """Re-arm after a pause (any thread; the handlers stay installed)."""
        global _active
        if not self.paused or _active not in (None, self):
            return
        self.paused = False
        if not self._arm(self.period_ns, self._signums):
            self.note = self.note or "could not re-arm the sampling timers"

    def stop(self, note: str | None = None) -> None:
        """Disarm; with ``note``, the reason is kept (the main thread goes back to the thread sampler)."""
        global _active
        if note and self.note is None:
            self.note = note
        self.active = False
        self.paused = False
        self.resting = False
        self._close_timers()
        self._deactivate()
        self.sampler.restart(self.thread_id)

    def _deactivate(self) -> None:
        """No handler serves this sampler any more (the C one's references to it released)."""
        global _active
        if _active is self:
            _active = None
            if self.handler == "c":
                _native.ext.set_tick(None)
        if self.handler == "c":
            self.st.unbind()

    def forked(self) -> None:
        """In a forked child (which inherits no timer): sample nothing, and give the handlers' signals their
        default action back, as in the child of an unprofiled program."""
        self.active = False
        self.paused = False
        self.resting = False
        self._timers = []
        self._deactivate()
        default_where(_installed, HANDLER)
        _installed.clear()

    def _close_timers(self) -> None:
        if self.handler == "c":  # (before the timers are deleted: their ids may be reused)
            self.st.set_timer(0, None)
            self.st.set_timer(1, None)
        timers, self._timers = self._timers, []
        for t in timers:
            try:
                t.close()
            except OSError:
                pass


def default_where(sigs, handler) -> None:
    """Give each of ``sigs`` whose handler is still ``handler`` its default action (``SIG_DFL``): a forked child's."""
    for s in sigs:
        try:
            if signal.getsignal(s) is handler:
                signal.signal(s, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


def sampler_cpu(native_id: int) -> int:
    """The main thread's CPU time (ns) now, read from any thread."""
    from .sampler import thread_cpu_ns

    if threading.get_native_id() == native_id:
        return time.thread_time_ns()
    return max(0, thread_cpu_ns(native_id))


def install() -> list[int] | None:
    """Install the handler for the first two free signals of ``CANDIDATES`` (main thread only): ``[wall signal,
    CPU signal]``, or None. Installed once per process and left in place (it does nothing while no sampler is
    active, so a signal still pending after ``stop`` is harmless)."""
    if len(_installed) == 2 and all(signal.getsignal(s) is HANDLER for s in _installed):
        return list(_installed)
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGRTMAX"):
        return None
    got = [s for s in _installed if signal.getsignal(s) is HANDLER]
    if _c_tick is not None:
        _native.ext.set_tick(None, _handler)  # (the C handler's fallback: a sampler with the Python state)
    for k in CANDIDATES:
        if len(got) == 2:
            break
        signum = signal.SIGRTMAX - k
        if signum in got:
            continue
        try:
            if signal.getsignal(signum) not in (signal.SIG_DFL, None):
                continue
            signal.signal(signum, HANDLER)
            signal.siginterrupt(signum, False)  # SA_RESTART: restartable system calls are not cut short
        except (OSError, ValueError, RuntimeError):
            continue
        got.append(signum)
    if len(got) < 2:
        return None
    _installed[:] = got
    return list(got)
