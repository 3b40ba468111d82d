"""Overhead of the memory lane (issue 19) on the SD demo program: plain, `stepscope run --no-memory` and
`stepscope run` (memory lane on, the default), interleaved (A B C, A B C, ...), demo trace list, 101 Hz.

The figures are medians of (a) the pipeline call's own time as the program prints it and (b) the process wall
time, each against the plain runs of the same invocation; "memory lane" is the default run against the run
without it. The machine's 1-minute load average is printed at every repeat (a shared machine: other work shows
as noise in both arms alike, which interleaving spreads evenly).

    python benchmarks/memory_overhead.py --model tiny --repeats 7
    python benchmarks/memory_overhead.py --model tiny --size 128 --steps 10 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from stepscope.pipelines.sd import demo_traces


def once(cmd: list[str], env: dict) -> tuple[float, float]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    m = re.search(r"steps at \d+ px in ([\d.]+) s", r.stdout)
    return float(m.group(1)), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hz", type=float, default=101.0)
    args = ap.parse_args()
    prog = [sys.executable, "-m", "stepscope.pipelines.demo_program", "--model", args.model, "--steps", str(args.steps)]
    if args.size:
        prog += ["--size", str(args.size)]
    store = tempfile.mkdtemp(prefix="stepscope-memory-overhead-")
    base = [sys.executable, "-m", "stepscope", "run", "-q", "--hz", str(args.hz), "--store", store]
    for t in demo_traces():
        base += ["--trace", t]
    arms = {"plain": prog, "no memory lane": base + ["--no-memory", "--", *prog], "memory lane": base + ["--", *prog]}
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    once(prog, env)  # warm the file cache
    pipe: dict[str, list[float]] = {k: [] for k in arms}
    wall: dict[str, list[float]] = {k: [] for k in arms}
    loads = []
    for i in range(args.repeats):
        for k, cmd in arms.items():
            p, w = once(cmd, env)
            pipe[k].append(p)
            wall[k].append(w)
        loads.append(os.getloadavg()[0])
        print(f"repeat {i + 1}: " + "  ".join(f"{k} {pipe[k][-1]:.3f} s" for k in arms) + f"  | load {loads[-1]:.2f}",
              flush=True)
    med = {k: statistics.median(v) for k, v in pipe.items()}
    medw = {k: statistics.median(v) for k, v in wall.items()}
    print(f"\n{args.model}, {args.steps} steps, {args.size or 'default'} px, {args.repeats} interleaved repeats, "
          f"{args.hz:g} Hz, demo trace list; {os.cpu_count()} CPUs, 1-min load average {min(loads):.2f}-{max(loads):.2f} "
          f"(median {statistics.median(loads):.2f})")
    for k in arms:
        print(f"pipeline call {k:>15}: {med[k]:.3f} s   process wall {medw[k]:.2f} s")
    print(f"memory lane vs no memory lane: pipeline call {100 * (med['memory lane'] / med['no memory lane'] - 1):+.1f}%, "
          f"process wall {100 * (medw['memory lane'] / medw['no memory lane'] - 1):+.1f}%")
    print(f"stepscope (memory lane on) vs plain: pipeline call {100 * (med['memory lane'] / med['plain'] - 1):+.1f}%, "
          f"process wall {100 * (medw['memory lane'] / medw['plain'] - 1):+.1f}%")
    # the per-event costs behind it, measured here in this process
    from stepscope.profiling.memory import MemoryLane, RssReader

    r, lane = RssReader(), MemoryLane()
    n = 20000
    t = time.perf_counter_ns()
    for _ in range(n):
        r.read()
    rss_us = (time.perf_counter_ns() - t) / n / 1e3
    t = time.perf_counter_ns()
    for _ in range(n):
        r.peak()
    hwm_us = (time.perf_counter_ns() - t) / n / 1e3
    t = time.perf_counter_ns()
    for k in range(n):
        lane.sample(k)
    lane_us = (time.perf_counter_ns() - t) / n / 1e3
    print(f"per event: RSS read {rss_us:.2f} us, VmHWM read {hwm_us:.2f} us (step-level spans only), "
          f"a lane sample {lane_us:.2f} us (x {args.hz:g}/s in the recorder thread)")


if __name__ == "__main__":
    main()
