"""Busy threads sampled by a timer of their own (issue 41): the signal they use.

The recorder thread's looks are wake-ups of its own (~45 us of CPU each on a 2-core VM, more than the look): on a
server whose one busy thread (a UNet worker) runs all the time, 101 of them a second were most of what sampling
cost. So a thread other than the main one that has run all the time for ``OWN_STREAK`` looks in a row
(``record/native/ownclock.c``) gets a POSIX timer of its own (``timer_create`` with ``SIGEV_THREAD_ID``, as
Datadog's profiler's newer mode; on the wall clock, each expiry drawn in 0.5-1.5 periods): the signal finds that
thread running, and a C handler reads its stack there; the recorder then looks every ``OWN_SLOW`` periods while only
such threads run. A thread that waits more than a tenth of the time has its timer disarmed. This module picks the signal (a free real-time one, as ``cpuwake`` picks its own) and installs the C
handler for it; ``close`` uninstalls it.
"""

from __future__ import annotations

import os
import signal
import sys

from .. import native as _native

#: the real-time signals tried, counted down from SIGRTMAX (after those of ``signals`` and ``cpuwake``)
CANDIDATES = (9, 10, 11, 12, 13, 14, 3, 4, 5, 6, 7, 8)


class OwnTimers:
    """The busy threads' own timers' signal, installed (``start``) until ``close``. ``signum``: its number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    @classmethod
    def start(cls, taken: tuple[int, ...] = ()) -> OwnTimers | None:
        """The signal installed for the walker's own timers, or None where there are none (not Linux, no C walk, no
        free real-time signal, ``STEPSCOPE_OWN_TIMERS=0``). ``taken``: signal numbers already in use (the main
        thread's sampler's, the recorder's rest). Never raises."""
        ext = _native.ext
        if (not sys.platform.startswith("linux") or ext is None or not hasattr(ext, "own_signal")
                or not hasattr(signal, "SIGRTMAX") or os.environ.get("STEPSCOPE_OWN_TIMERS") == "0"):
            return None
        try:
            for k in CANDIDATES:
                signum = signal.SIGRTMAX - k
                if signum in taken or signum < signal.SIGRTMIN or signal.getsignal(signum) not in (signal.SIG_DFL, None):
                    continue
                ext.own_signal(signum)
                return cls(signum)
        except (OSError, ValueError, AttributeError):
            return None
        return None

    def close(self, walker) -> None:
        """Delete every own timer of ``walker`` (a ``Walker``, or None) and uninstall the handler. Idempotent."""
        if walker is not None:
            walker.own_stop()
        if self.signum:
            self.signum = 0
            _native.ext.own_signal(0)
