"""Overhead of the memory lane (issue 19) on the SD demo program: plain, `stepscope run --no-memory` and
`stepscope run` (memory lane on, the default), interleaved (A B C, A B C, ...), demo trace list, 101 Hz.

The figures are medians of (a) the pipeline call's own wall and CPU time as the program prints them and (b) the
process's wall and CPU time (user + system, from wait4), each against the plain runs of the same invocation (CPU
time is what a loaded machine disturbs least); "memory lane" is the default run against the run
without it. The machine's 1-minute load average is printed at every repeat (a shared machine: other work shows
as noise in both arms alike, which interleaving spreads evenly).

    python benchmarks/memory_overhead.py --model tiny --repeats 7 [--threads 1]
    python benchmarks/memory_overhead.py --model tiny --size 128 --steps 10 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import resource
import re
import statistics
import subprocess
import sys
import tempfile
import time

from stepscope.pipelines.sd import demo_traces


def once(cmd: list[str], env: dict) -> tuple[float, float, float, float]:
    """(pipeline call wall s, its CPU s as the program prints them, process wall s, process CPU s: user + system
    of the command and its children, from wait4)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err[-2000:]}")
    m = re.search(r"steps at \d+ px in ([\d.]+) s(?: \(CPU ([\d.]+) s\))?", out)
    return float(m.group(1)), float(m.group(2) or "nan"), wall, ru.ru_utime + ru.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hz", type=float, default=101.0)
    ap.add_argument("--threads", type=int, default=None, help="torch's threads in every arm (OMP_NUM_THREADS): 1 on "
                    "a loaded machine, where OpenMP's spin-waits make CPU and wall time follow the load")
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
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    once(prog, env)  # warm the file cache
    pipe: dict[str, list[float]] = {k: [] for k in arms}
    pcpu: dict[str, list[float]] = {k: [] for k in arms}
    wall: dict[str, list[float]] = {k: [] for k in arms}
    cpu: dict[str, list[float]] = {k: [] for k in arms}
    loads = []
    for i in range(args.repeats):
        for k, cmd in arms.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            p, pc, w, c = once(cmd, env)
            pipe[k].append(p)
            pcpu[k].append(pc)
            wall[k].append(w)
            cpu[k].append(c - (before.ru_utime + before.ru_stime))
        loads.append(os.getloadavg()[0])
        print(f"repeat {i + 1}: " + "  ".join(f"{k} {pipe[k][-1]:.3f} s (CPU {pcpu[k][-1]:.3f} s)" for k in arms)
              + f"  | load {loads[-1]:.2f}", flush=True)
    med = {k: statistics.median(v) for k, v in pipe.items()}
    medw = {k: statistics.median(v) for k, v in wall.items()}
    medpc = {k: statistics.median(v) for k, v in pcpu.items()}
    medc = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"\n{args.model}, {args.steps} steps, {args.size or 'default'} px, {args.repeats} interleaved repeats, "
          f"{args.threads or 'default'} torch threads, "
          f"{args.hz:g} Hz, demo trace list; {os.cpu_count()} CPUs, 1-min load average {min(loads):.2f}-{max(loads):.2f} "
          f"(median {statistics.median(loads):.2f})")
    for k in arms:
        print(f"{k:>15}: pipeline call {med[k]:.3f} s (CPU {medpc[k]:.3f} s)   process wall {medw[k]:.2f} s "
              f"(CPU {medc[k]:.2f} s)")

    def pct(d, a, b):
        return f"{100 * (d[a] / d[b] - 1):+.1f}%"

    # CPU time is what a loaded machine disturbs least (the wait for a core does not count)
    print(f"memory lane vs no memory lane: pipeline call CPU {pct(medpc, 'memory lane', 'no memory lane')}, wall "
          f"{pct(med, 'memory lane', 'no memory lane')}; process CPU {pct(medc, 'memory lane', 'no memory lane')}, "
          f"wall {pct(medw, 'memory lane', 'no memory lane')}")
    print(f"stepscope (memory lane on) vs plain: pipeline call CPU {pct(medpc, 'memory lane', 'plain')}, wall "
          f"{pct(med, 'memory lane', 'plain')}; process CPU {pct(medc, 'memory lane', 'plain')}, "
          f"wall {pct(medw, 'memory lane', 'plain')}")
    pairs = [a / b - 1 for a, b in zip(pcpu["memory lane"], pcpu["no memory lane"])]
    print(f"pairwise (same repeat) pipeline-call CPU, memory lane vs none: median {100 * statistics.median(pairs):+.1f}%, "
          f"range {100 * min(pairs):+.1f}% .. {100 * max(pairs):+.1f}%")
    # the per-event costs behind it, measured here in this process
    from stepscope.record.memory.history import MemoryLane, RssReader

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
    print(f"per event: RSS read {rss_us:.2f} us, RSS high-water mark {hwm_us:.2f} us (step-level spans only), "
          f"a lane sample {lane_us:.2f} us (x {args.hz:g}/s, in the main thread's wall-timer handler)")


if __name__ == "__main__":
    main()
