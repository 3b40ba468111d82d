"""The one clock shared by spans, samples and device events.

Every timestamp stepscope records is ``time.perf_counter_ns()`` (ns, monotonic, process-wide on Linux
and macOS it is CLOCK_MONOTONIC, so a parent and a child process agree). The clock is anchored to wall
time once per run: ``wall_ns = anchor.wall_ns + (mono_ns - anchor.mono_ns)``. Foreign timelines
(Kineto's ``baseTimeNanoseconds``, Sentry's RFC 3339 timestamps) are rebased onto it when recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

now_ns = time.perf_counter_ns


@dataclass(frozen=True, slots=True)
class Anchor:
    """A pair of readings taken together: ``mono_ns`` (perf_counter_ns) and ``wall_ns`` (time_ns, Unix epoch)."""

    mono_ns: int
    wall_ns: int

    @classmethod
    def take(cls) -> "Anchor":
        """Read both clocks back to back (the wall reading is bracketed to halve the error)."""
        m0 = time.perf_counter_ns()
        w = time.time_ns()
        m1 = time.perf_counter_ns()
        return cls((m0 + m1) // 2, w)

    def to_wall_ns(self, mono_ns: int) -> int:
        """Wall time (ns since the Unix epoch) of a monotonic reading."""
        return self.wall_ns + (mono_ns - self.mono_ns)

    def to_mono_ns(self, wall_ns: int) -> int:
        """Monotonic reading (ns) of a wall time (ns since the Unix epoch)."""
        return self.mono_ns + (wall_ns - self.wall_ns)
