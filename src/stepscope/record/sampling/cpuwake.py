"""The recorder thread's deep rest: asleep while no thread of the process runs, woken by the process's CPU clock.

A server between requests (threads waiting in C, the main thread asleep) changes nothing that a sample or a memory
reading could show, yet a recorder that looks at 10 Hz pays a wake-up (~100 us of kernel time on a VM) and a look
each time. Once the recorder has seen nothing run for a while (``recorderloop``'s ``QUIET_NS``) it rests here instead:

- a POSIX timer on the process's CPU clock (``CLOCK_PROCESS_CPUTIME_ID``, timer_create(2), ``SIGEV_THREAD_ID``)
  sends a real-time signal to the recorder thread once the process has used ``CPU_PERIOD_NS`` of CPU time (every
  thread's, the recorder's own included; the kernel checks CPU timers at its scheduler tick, so the wake comes
  within a tick of that);
- the recorder thread blocks that signal and waits for it (the C ``park``, unseen by a program's own profiler:
  ``ppoll(2)`` on a ``signalfd(2)`` of it and on the stop signals' wakeup pipe, ``endsignals.StopWatch``, so that a
  SIGTERM reaching a main thread blocked in C is passed on at once, as at a look), until its next flush, or while
  nothing waits to be written, until ``IDLE_LOOK_NS`` after the last one: idle threads' stacks are charged the whole
  wait at the next look, and nothing would be lost by a crash meanwhile but that idle time;
- ``wake()`` (the session's finish, a fork) fires a second timer on the same signal at once (``CLOCK_MONOTONIC``,
  an expiry in the past): a timer's signal goes to the recorder thread by the kernel's reference to it, dropped if
  that thread is gone, where a ``pthread_kill`` to an ended thread would be undefined.

A thread that starts running is then seen within ``CPU_PERIOD_NS`` of CPU time, and the look that follows charges
it the wall time since its previous sample at its previous stack (``Sampler.sample``): no time is lost, as with the
10 Hz looks. Threads that start and end using less CPU than that between two flushes are seen at the flush.

The signal: the first of ``SIGRTMAX - CANDIDATES`` that the main thread's sampler does not use and that has its
default action (no handler of the program's). It is blocked in the recorder thread only and sent only to it; while
the recorder waits, a process-directed signal of that number (a program that sends itself a real-time signal it has
no handler for, which would end it) could be taken by the wait instead.

Linux and the C extension only (``CpuWake.start`` returns None elsewhere, and the recorder keeps its 10 Hz looks).
"""

from __future__ import annotations

import signal
import sys
import threading

from .. import native as _native
from ..spans.buffer import finished as _finished
from .timer import CLOCK_MONOTONIC, ThreadTimer

#: CLOCK_PROCESS_CPUTIME_ID (time.h): the CPU time of every thread of the process
CLOCK_PROCESS_CPUTIME_ID = 2

#: the process's CPU time (ns) after which a resting recorder is woken
CPU_PERIOD_NS = 10_000_000

#: a resting recorder with nothing to write looks (and writes its idle threads' samples) at least this often (ns)
IDLE_LOOK_NS = 10_000_000_000

#: the real-time signals tried, counted down from SIGRTMAX (as ``signals.CANDIDATES``)
CANDIDATES = (3, 4, 5, 6, 7, 8, 9, 10)


def other_tools() -> bool:
    """True when another ``sys.monitoring`` tool than stepscope's is registered (3.12+: cProfile, coverage, a
    debugger, ``sys.settrace``'s own; they see every thread's calls). Always False before 3.12."""
    mon = getattr(sys, "monitoring", None)
    if mon is not None:
        get = mon.get_tool
        for i in range(6):
            name = get(i)
            if name is not None and name != "stepscope":
                return True
    return False


def park(lock, timeout_s: float, poll_s: float, limit: int) -> int:
    """The recorder thread's wait between looks, on ``lock`` (held while recording; released to wake it: the
    session's finish, a fork). Returns 1 when woken (the lock acquired and released again), 0 after ``timeout_s``
    s. When a program's own profiler or tracer is active then (``other_tools``, or this thread's
    ``setprofile``/``settrace``), it goes on waiting, ``poll_s`` s a wait, until the tool is gone (2), or until
    ``limit`` finished spans wait to be written (3): on 3.12+ such a tool sees every thread's calls, and the
    recorder thread makes none meanwhile. With the C extension the wait and the checks are one C call
    (``_native.park``: calls made from C raise no ``sys.monitoring`` CALL event, PEP 669), so the tool sees
    nothing of it; without it they are Python calls that the tool may see."""
    if _native.waits is not None:
        return _native.waits.park(lock, timeout_s, poll_s, _finished, limit)
    if lock.acquire(timeout=max(0.0, timeout_s)):
        lock.release()
        return 1
    seen = 0
    while other_tools() or sys.getprofile() is not None or sys.gettrace() is not None:
        seen = 2
        if len(_finished) >= limit:
            return 3
        if lock.acquire(timeout=poll_s):
            lock.release()
            return 1
    return seen


class CpuWake:
    """The two timers and the signal of one recorder thread (made by ``start``, in that thread).

    ``rest(timeout_s, poll_s, limit, fd)`` arms the CPU timer and waits (the C ``park``'s return values: 1
    woken, 0 timed out, 2/3 after a foreign profiler); ``wake()`` may be called from any thread; ``close()`` from
    the recorder thread as it ends. Times in s; ``CPU_PERIOD_NS`` in ns of CPU time."""

    def __init__(self, signum: int, tid: int) -> None:
        self.signum = signum
        self._lock = threading.Lock()  # (wake vs close: a deleted timer's id may be reused by the next timer_create)
        self._cpu = ThreadTimer(signum, tid, CLOCK_PROCESS_CPUTIME_ID)
        try:
            self._now = ThreadTimer(signum, tid, CLOCK_MONOTONIC)
        except OSError:
            self._cpu.close()
            raise
        self._armed = False  # the CPU timer armed for a rest (``rest(keep=True)``)
        self.rests = 0  # how many times it rested
        self.waits = 0  # ... in how many waits (a rest looks again, without a row when nothing moved: ``recorderloop``)
        self.woken = 0  # ... and was woken before its timeout
        self.by_call = False  # the last rest was ended by a span that started (``_native.call_wake``)
        self.by_calls = 0  # ... how many rests were

    @classmethod
    def start(cls, taken: tuple[int, ...] = ()) -> CpuWake | None:
        """The recorder thread's ``CpuWake`` (call it in that thread: it blocks the signal there), or None where there
        is none (not Linux, no C extension, no free signal, no timer). ``taken``: signal numbers already in use (the
        main thread's sampler's). Never raises."""
        if not sys.platform.startswith("linux") or _native.waits is None or not hasattr(signal, "SIGRTMAX"):
            return None
        try:
            for k in CANDIDATES:
                signum = signal.SIGRTMAX - k
                if signum in taken or signal.getsignal(signum) not in (signal.SIG_DFL, None):
                    continue
                signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
                return cls(signum, threading.get_native_id())
        except (OSError, ValueError, AttributeError):
            return None
        return None

    def rest(self, timeout_s: float, poll_s: float, limit: int, fd: int = -1, keep: bool = False) -> int:
        """Wait up to ``timeout_s`` s for the process to use ``CPU_PERIOD_NS`` of CPU time, for ``wake()``, or for
        ``fd`` (>= 0: the read end of the stop signals' wakeup pipe, ``endsignals.StopWatch``) to become readable,
        or for a span to start (a traced call, C-recorded or not: ``_native.call_wake``; ``by_call`` says so after);
        while a profiler of the program's is active, as ``park`` (``poll_s``, ``limit``). ``keep``: a timeout
        leaves the CPU timer armed, and the next ``rest`` goes on counting from its start (one rest in several waits;
        ``settle()`` ends it): arming and disarming that timer cost ~100-150 us of CPU on a VM (the kernel's tick
        dependency set and cleared for the process), more than the wait's own wake-up."""
        if not self._armed:
            self.rests += 1
            self._cpu.arm(CPU_PERIOD_NS)
            self._armed = True
        self.waits += 1
        r = 1
        calls = _native.ext.call_wake(self._now.timer_id) if self._now is not None and _native.ext is not None else -1
        try:
            r = _native.waits.park(self.signum, max(timeout_s, 0.0), poll_s, _finished, limit, fd)
        finally:
            if calls >= 0:
                self.by_call = _native.ext.call_wake(-1) != calls
                self.by_calls += self.by_call
            if r != 0 or not keep:
                self.settle()
        self.woken += r == 1
        return r

    def settle(self) -> None:
        """End a rest that ``rest(keep=True)`` left armed (nothing when none is)."""
        if self._armed:
            self._armed = False
            self._cpu.disarm()

    def wake(self) -> None:
        """Wake the recorder thread from ``rest`` (at once, or at its next rest if it is not resting). Any thread."""
        with self._lock:
            if self._now is not None:
                self._now.arm_at(1)  # (an absolute time long past: expires at once)

    def close(self) -> None:
        """Delete the timers (a signal already pending is dropped with the thread). Idempotent."""
        with self._lock:
            for t in (self._cpu, self._now):
                if t is not None:
                    t.close()
            self._cpu = self._now = None
