"""A periodic POSIX timer that signals one thread (Linux, through ctypes; stdlib only).

``timer_create(clock, SIGEV_THREAD_ID)`` (timer_create(2), sigevent(7)): the kernel sends ``signum`` to the
thread with OS id ``tid`` every ``period_ns`` of that clock: wall time (``CLOCK_MONOTONIC``, whatever the
thread does: sleeping, waiting on I/O or a lock, inside a C call) or the thread's CPU time. Expirations that
fall while the signal is still pending are merged by the kernel; the sampler counts them from the timer's
schedule (``sampling.signals``), so a merged expiration loses no time.

Only the target thread is interrupted, so other threads never see ``EINTR`` from it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

CLOCK_MONOTONIC = 1
SIGEV_THREAD_ID = 4
TIMER_ABSTIME = 1  # Linux: deliver to the thread named in sigev_notify_thread_id


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _Sigevent(ctypes.Structure):
    # struct sigevent (64 bytes on Linux): sigval, signo, notify, then a union whose first int is the thread id
    _fields_ = [("sigev_value", ctypes.c_void_p), ("sigev_signo", ctypes.c_int), ("sigev_notify", ctypes.c_int),
                ("sigev_notify_thread_id", ctypes.c_int), ("_pad", ctypes.c_int * 11)]


_libc = None


def _lib():
    """libc with timer_create/timer_settime/timer_delete (librt before glibc 2.34). Raises OSError."""
    global _libc
    if _libc is None:
        if not sys.platform.startswith("linux"):
            raise OSError("per-thread POSIX timers need Linux")
        for name in (None, ctypes.util.find_library("rt")):
            lib = ctypes.CDLL(name, use_errno=True)
            if hasattr(lib, "timer_create"):
                break
        else:
            raise OSError("timer_create not found in libc or librt")
        lib.timer_create.argtypes = [ctypes.c_int, ctypes.POINTER(_Sigevent), ctypes.POINTER(ctypes.c_void_p)]
        lib.timer_settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                                      ctypes.POINTER(_Itimerspec)]
        lib.timer_delete.argtypes = [ctypes.c_void_p]
        lib.timer_gettime.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Itimerspec)]
        _libc = lib
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        import os

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def thread_cpu_clock(tid: int) -> int:
    """The clock id of the CPU time of the thread with OS id ``tid`` of this process:
    ``MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`` (include/linux/posix-timers.h)."""
    return ((~int(tid)) << 3) | 6


class ThreadTimer:
    """An interval timer signalling the thread with OS id ``tid`` (``threading.get_native_id()``).

    ``clock``: ``CLOCK_MONOTONIC`` (wall time; expires while the thread sleeps too) or ``thread_cpu_clock(tid)``
    (the thread's CPU time: expires only while it runs; the kernel checks CPU timers at its scheduler tick, so
    such a timer fires at most about CONFIG_HZ times a second). ``arm(period_ns)`` starts it (first expiration
    one period from now), ``disarm()`` stops it, ``close()`` deletes it. Any thread may call them. Raises
    OSError where the platform has no such timer.
    """

    def __init__(self, signum: int, tid: int, clock: int = CLOCK_MONOTONIC) -> None:
        lib = _lib()
        ev = _Sigevent()
        ev.sigev_signo = int(signum)
        ev.sigev_notify = SIGEV_THREAD_ID
        ev.sigev_notify_thread_id = int(tid)
        self._id = ctypes.c_void_p()
        _check(lib.timer_create(int(clock), ctypes.byref(ev), ctypes.byref(self._id)), "timer_create")
        self.period_ns = 0
        #: ``fn(*args)`` disarms with one C call and no Python frame (for a signal handler)
        self._zero = _Itimerspec()
        self.disarm_call = (lib.timer_settime, (self._id, 0, ctypes.byref(self._zero), None))
        self._settime = lib.timer_settime
        self._once = _Itimerspec()
        self._once_ref = ctypes.byref(self._once)

    @property
    def timer_id(self) -> int | None:
        """The kernel timer's id as C's ``timer_t`` holds it (an int), None once closed: what the C signal handler
        re-arms (``_native.Tick.set_timer``)."""
        return (self._id.value or 0) if self._id is not None else None  # (ctypes reads a null pointer, id 0, as None)

    def arm(self, period_ns: int) -> None:
        """Expire every ``period_ns`` (ns, > 0) from one period from now."""
        sec, nsec = divmod(int(period_ns), 1_000_000_000)
        spec = _Itimerspec(_Timespec(sec, nsec), _Timespec(sec, nsec))
        _check(_lib().timer_settime(self._id, 0, ctypes.byref(spec), None), "timer_settime")
        self.period_ns = int(period_ns)

    def arm_at(self, t_ns: int, interval_ns: int = 0) -> None:
        """Expire at ``t_ns`` (an absolute ``CLOCK_MONOTONIC`` time, ns: ``time.perf_counter_ns()`` on Linux; a
        time already past expires at once), then every ``interval_ns`` (ns; 0: once). The caller keeps its own
        schedule. No error is raised: a failed call leaves the timer as it was."""
        v = self._once.it_value
        v.tv_sec, v.tv_nsec = divmod(int(t_ns), 1_000_000_000)
        i = self._once.it_interval
        i.tv_sec, i.tv_nsec = divmod(int(interval_ns), 1_000_000_000)
        self._settime(self._id, TIMER_ABSTIME, self._once_ref, None)
        self.period_ns = int(interval_ns) or 1

    def gettime(self) -> tuple[int, int]:
        """``(ns to the next expiration, interval ns)`` (timer_gettime(2)); (0, 0) when disarmed. Raises OSError."""
        spec = _Itimerspec()
        _check(_lib().timer_gettime(self._id, ctypes.byref(spec)), "timer_gettime")
        v, i = spec.it_value, spec.it_interval
        return v.tv_sec * 1_000_000_000 + v.tv_nsec, i.tv_sec * 1_000_000_000 + i.tv_nsec

    def disarm(self) -> None:
        """Stop expiring (a signal already pending is still delivered)."""
        if self._id is not None and self.period_ns:
            spec = _Itimerspec()
            _lib().timer_settime(self._id, 0, ctypes.byref(spec), None)
            self.period_ns = 0

    def close(self) -> None:
        """Disarm and delete the timer. Idempotent."""
        if self._id is not None:
            self.disarm()
            _lib().timer_delete(self._id)
            self._id = None
