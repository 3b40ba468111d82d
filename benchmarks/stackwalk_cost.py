"""The cost of one look at every thread (``Sampler.sample()``, the recorder thread's sample), the C stack walk
(``stepscope.record.native.Walker``, issue 41) against the Python walk (``sys._current_frames`` and ``f_back``), in
the same process: N busy threads (1, 4, 12 by default), each running Python code about ``--depth`` frames deep
(a recursion, then a leaf that calls a few small functions, so the leaf's frames vary as a program's do).

Looks by the two walks alternate in rounds, with a 1 ms sleep between looks (the busy threads run meanwhile, as
between a recorder's looks: what a look reads is in other cores' caches, as in a program; each busy thread passes the
GIL on every ~50 us, so every one has run and is walked at each look: "walked" says how many were); each look is timed
alone
(``perf_counter_ns`` around ``sample()``) and a figure is the median over the looks (a look preempted by the switch
interval, waiting for the GIL behind a busy thread, is an outlier the median leaves out). Prints, per N: us per look
and per thread for each walk, and their ratio; then the walk alone, the same way: the C walk's ``Walker.look`` against
the Python walk's ``sys._current_frames()`` and ``Sampler._record`` of each thread (a look's remainder, the same for
both, is its bookkeeping: each thread's CPU clock, one system call, and its sample's accounting).

    PYTHONPATH=src python benchmarks/stackwalk_cost.py [--threads 1,4,12] [--depth 30] [--looks 3000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from time import perf_counter_ns


def _leaf_a(x: int) -> int:
    return x * 3 + 1


def _leaf_b(x: int) -> int:
    return (x ^ 0x5A5A) & 0xFFFF


def _leaf(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(200):
            x = _leaf_a(x) if i & 1 else _leaf_b(x)
        time.sleep(0)  # (the GIL passed on: every busy thread runs between two looks, so each look walks them all)


def _down(n: int, stop: threading.Event) -> None:
    if n > 0:
        _down(n - 1, stop)
    else:
        _leaf(stop)


def start_busy(n: int, depth: int) -> tuple[threading.Event, list[threading.Thread]]:
    """``n`` threads spinning ``depth`` frames deep (the thread's bootstrap frames counted); returns their stop event
    and the threads."""
    stop = threading.Event()
    # Thread._bootstrap, _bootstrap_inner, run, then _down's recursion and _leaf, _leaf_a/_leaf_b: depth in all
    threads = [threading.Thread(target=_down, args=(max(0, depth - 6), stop), daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return stop, threads


def _python_walk(s) -> None:
    """The Python walk alone: every other thread's frames, walked and recorded as ``Sampler.sample`` does."""
    me = threading.get_ident()
    for tid, f in sys._current_frames().items():
        if tid != me:
            s._record(f, tid, 0, 0, 0)


def measure(n: int, depth: int, looks: int, rounds: int) -> dict:
    """The median ns of a look by each walk ("c", "python": ``Sampler.sample``) and of the walk alone ("c walk",
    "python walk"), with ``n`` busy threads; "depth": the deepest stack recorded (frames)."""
    from stepscope.record.sampling.sampler import Sampler

    from stepscope.record.sampling.sampler import HIDDEN_FILES
    from stepscope.record import native

    samplers = {"c": Sampler(walk="c"), "python": Sampler(walk="python")}
    walker, others = native.ext.Walker(256, HIDDEN_FILES), {threading.get_ident()}
    py = Sampler(walk="python")
    walks = {"c": lambda: walker.look(others), "python": lambda: _python_walk(py)}
    stop, threads = start_busy(n, depth)
    time.sleep(0.2)
    walls: dict[str, list[int]] = {k: [] for k in [*samplers, "c walk", "python walk"]}
    ran: dict[str, list[int]] = {k: [] for k in samplers}
    deepest = 0
    try:
        for s in samplers.values():  # warm: the tables hold the frames and stacks the threads go through
            for _ in range(200):
                s.sample()
                time.sleep(0.001)
            deepest = max([deepest, *map(len, s.drain()[1])])
        for fn in walks.values():
            for _ in range(200):
                fn()
        walker.take()
        py.drain()
        per_round = max(1, looks // rounds)
        for _ in range(rounds):
            for name, fn in [*((k, s.sample) for k, s in samplers.items()),
                             *((f"{k} walk", fn) for k, fn in walks.items())]:
                got = walls[name]
                for _ in range(per_round):
                    t0 = perf_counter_ns()
                    fn()
                    got.append(perf_counter_ns() - t0)
                    time.sleep(0.001)  # (the busy threads run between looks, as between a recorder's)
                    if name in samplers:
                        ran[name].append(len(samplers[name].ran))
            for s in (*samplers.values(), py):
                s.drain()
            walker.take()
    finally:
        stop.set()
        for t in threads:
            t.join()
    out = {name: statistics.median(got) for name, got in walls.items()}
    out["depth"] = deepest
    out["walked"] = statistics.mean(ran["c"] + ran["python"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,4,12", help="busy thread counts (comma list)")
    ap.add_argument("--depth", type=int, default=30, help="frames a busy thread's stack holds")
    ap.add_argument("--looks", type=int, default=2000, help="looks per walk and thread count")
    ap.add_argument("--rounds", type=int, default=6, help="alternations of the two walks")
    a = ap.parse_args()
    from stepscope.record.sampling.sampler import walk_choice

    if walk_choice()[0] != "c":
        sys.exit(f"no C walk here: {walk_choice()[1]}")
    print(f"Python {sys.version.split()[0]}, depth {a.depth}, {a.looks} looks per walk (median per look)")
    head = f"{'C us':>8} {'C us/thr':>9} {'Py us':>8} {'Py us/thr':>10} {'Py/C':>5}"
    print(f"{'':>20} {'a look (Sampler.sample)':^44} | {'the walk alone':^44}")
    print(f"{'threads':>7} {'walked':>6} {'depth':>5} {head} | {head}")
    for n in (int(x) for x in a.threads.split(",")):
        r = measure(n, a.depth, a.looks, a.rounds)
        cells = []
        for c, p in ((r["c"], r["python"]), (r["c walk"], r["python walk"])):
            cells.append(f"{c / 1e3:>8.1f} {c / 1e3 / n:>9.2f} {p / 1e3:>8.1f} {p / 1e3 / n:>10.2f} {p / c:>5.1f}")
        print(f"{n:>7} {r['walked']:>6.1f} {r['depth']:>5} {cells[0]} | {cells[1]}", flush=True)


if __name__ == "__main__":
    main()
