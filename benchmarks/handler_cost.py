"""The cost of the main thread's timer-signal handler (issue 41): the C handler (``_native.tick``,
record/native/sigtick.c) against its Python fallback (``sampling.signals._handler`` with the Python walk), in the same
process.

Each handler is called as CPython calls it (the signal number, the running frame) ``--calls`` times in a row, from a
frame ``--depth`` deep, with its wall expiration due each time (a real tick: the schedule, the walk, the sample's row,
the rest rule); the loop's own cost (setting the due time) is measured alone and taken off. The signal's delivery
(the kernel's, the same for both) is not in these figures. Sessions of the two alternate ``--rounds`` times; the
figure is the median round. Prints us a call for each and their ratio.

    PYTHONPATH=src python benchmarks/handler_cost.py [--depth 30] [--calls 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))


def _deep(n: int, f):
    return _deep(n - 1, f) if n else f()


def one_round(kind: str, depth: int, calls: int, store: str) -> float:
    """us a call of the ``kind`` ("c" or "python") handler."""
    from stepscope.record import api
    from stepscope.record.sampling import signals
    from stepscope.record.settings import Settings

    if kind == "python":
        os.environ["STEPSCOPE_SAMPLER"] = "python"
    try:
        api.start(Settings(profiles_hz=1, memory=False, store=store))  # (its own ticks: once a second)
    finally:
        os.environ.pop("STEPSCOPE_SAMPLER", None)
    s = signals._active
    if s is None or s.handler != kind:
        api.shutdown()
        sys.exit(f"no {kind} handler here ({getattr(s, 'handler', None)})")
    h, sig, now = signals.HANDLER, s.signum, time.perf_counter_ns

    def timed() -> float:
        fr = sys._getframe()
        t0 = now()
        for _ in range(calls):
            s.due = now() - 1
            s.quiet_ticks = 0  # (never rests: every call is a sampled tick)
            h(sig, fr)
        t1 = now()
        for _ in range(calls):
            s.due = now() - 1
            s.quiet_ticks = 0
        return ((t1 - t0) - (now() - t1)) / calls / 1e3

    try:
        return _deep(depth, timed)
    finally:
        api.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    store = tempfile.mkdtemp(prefix="stepscope-handler-")
    got: dict[str, list[float]] = {"c": [], "python": []}
    for r in range(a.rounds):
        for kind in (("c", "python") if r % 2 == 0 else ("python", "c")):
            got[kind].append(one_round(kind, a.depth, a.calls, store))
    c, p = statistics.median(got["c"]), statistics.median(got["python"])
    print(f"main thread's wall tick, {a.depth} frames deep, {a.calls} calls x {a.rounds} rounds (median round): "
          f"C handler {c:.2f} us a call, Python handler {p:.2f} us: {p / c:.1f}x")


if __name__ == "__main__":
    main()
