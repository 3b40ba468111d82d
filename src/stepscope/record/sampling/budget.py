"""The sampler's overhead budget (as Datadog's profiler keeps one): the CPU the recorder thread spends reading the
other threads' stacks, at most a share of the process's CPU time (``Settings.overhead_budget``: 1% by default).

Checked every ``WINDOW_NS`` of the recorder's loop (``session.Session._record_loop``): over the budget, the other
threads' period doubles (never under ``FLOOR_HZ``); under a quarter of it, it halves again, up to the asked rate.
The cost counted: the recorder's CPU in its looks, and the busy threads' own timers' signal handlers in their
threads, each signal's delivery counted too (``owntimers``; ``ownclock.c``'s ``OWN_SIGNAL_NS``). While the main
thread is sampled by its own timer signal (``signals``) the looks and the own timers take the lowered rate, and the
main thread keeps the asked one; while the recorder reads the main thread too (no signal, or a resting main thread:
a server between requests) every look keeps the asked rate, and only the busy threads' own timers take the lowered
one (a server whose request threads run all the time). A sample is
still charged the time since that thread's previous one (``Sampler.sample``, its cap in periods of the period in
use), so the time adds up at any rate. ``rates`` says how long each rate was used (the run's
``env["sampler"]["others_hz"]``; the first screen and the report name them when the rate was lowered).

Stdlib only; one clock read (``time.thread_time_ns``) before and after a look, one (``time.process_time_ns``) a window.
"""

from __future__ import annotations

import time

#: How often the budget is checked (ns of the run's clock).
WINDOW_NS = 250_000_000
#: The lowest rate the other threads are read at (Hz).
FLOOR_HZ = 10.0


class Budget:
    """The other threads' sampling period under the budget ``share`` (0..1) of the process's CPU, for the asked
    rate ``hz`` (samples/s; > 0). ``period_ns(by_signal)`` gives the period of the next look; ``look_started`` and
    ``look_ended`` time a look; ``tick(t_ns, by_signal)`` checks the budget once a window; ``close(t_ns)`` ends the
    last window."""

    def __init__(self, hz: float, share: float, t_ns: int) -> None:
        self.period = 1e9 / hz
        self.hz, self.share = hz, share
        self.scale = 1  # the other threads' period is ``period * scale``
        self.max_scale = max(1, int(hz / FLOOR_HZ))
        self.look_ns = 0  # this thread's CPU time (ns) in looks at other threads, in the current window
        self.window_t, self.window_proc = t_ns, time.process_time_ns()
        self.by_signal = False
        self.at_scale: dict[int, int] = {}  # scale -> ns of the run's clock spent at it
        self._c0 = 0
        self._own_ns = 0  # the own timers' handlers' time (ns) at the window's start

    def period_ns(self, by_signal: bool) -> float:
        """The period (ns) until the next look: the asked one unless the main thread is sampled by signal."""
        self.by_signal = by_signal
        return self.period * self.scale if by_signal else self.period

    def look_started(self) -> None:
        self._c0 = time.thread_time_ns()

    def look_ended(self) -> None:
        self.look_ns += time.thread_time_ns() - self._c0

    def tick(self, t_ns: int, own_ns: int = 0) -> bool:
        """Once a window (``WINDOW_NS``): lower or raise the other threads' rate (see the module doc). ``own_ns``:
        the busy threads' own timers' handlers' time so far (ns, ``Sampler.own_ns``; already in ``look_ns``,
        where ``Walker.run`` adds it). True when a window ended here (the rate may have changed)."""
        if t_ns - self.window_t < WINDOW_NS:
            return False
        proc = time.process_time_ns()
        self.at_scale[self.scale] = self.at_scale.get(self.scale, 0) + (t_ns - self.window_t)
        used = proc - self.window_proc
        # (a rate that would be used: the looks' with the main thread sampled by signal, else the own timers' if any ran)
        lowers = self.by_signal or own_ns > self._own_ns
        self._own_ns = own_ns
        if lowers and self.look_ns > self.share * used and self.scale < self.max_scale:
            self.scale = min(self.scale * 2, self.max_scale)
        elif self.scale > 1 and (not lowers or self.look_ns < self.share / 4 * used):
            self.scale //= 2
        self.window_t, self.window_proc, self.look_ns = t_ns, proc, 0
        return True

    def own_period_ns(self) -> int:
        """The busy threads' own timers' period (ns; ``Sampler.own_period``): 0 (the looks') at the asked rate."""
        return int(self.period * self.scale) if self.scale > 1 else 0

    def close(self, t_ns: int) -> None:
        """The last window ends at ``t_ns`` (the recorder stops)."""
        self.at_scale[self.scale] = self.at_scale.get(self.scale, 0) + max(0, t_ns - self.window_t)
        self.window_t = t_ns

    def rates(self) -> dict[str, float]:
        """The other threads' rates used: ``{"101": seconds, "50.5": seconds, ...}`` (Hz as text, 4 digits)."""
        return {f"{self.hz / k:.4g}": round(ns / 1e9, 3) for k, ns in sorted(self.at_scale.items())}
