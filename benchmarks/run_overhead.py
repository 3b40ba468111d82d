"""Whole-run overhead of `stepscope run` at the defaults (demo trace list, 101 Hz) on the SD demo program.

Runs the demo program plain and under stepscope, interleaved (A B A B ...), and compares medians of
(a) the pipeline call's own time as the program prints it and (b) the process wall time. The ratio
against the plain runs of the same command, in the same invocation, is the figure.

    python benchmarks/run_overhead.py --model tiny --repeats 5
    python benchmarks/run_overhead.py --model sd15 --steps 3 --size 256 --repeats 3
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


def once(cmd: list[str], env: dict) -> tuple[float, float, float]:
    """(pipeline call wall s, its process CPU s, process wall s) of one run of ``cmd``."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    m = re.search(r"steps at \d+ px in ([\d.]+) s \(CPU ([\d.]+) s\)", r.stdout)
    return float(m.group(1)), float(m.group(2)), wall


def ratio_line(label: str, plain: list[float], traced: list[float]) -> str:
    """Median overhead and the min..max of the pairwise ratios (repeat i traced / repeat i plain)."""
    pairs = sorted(t / p - 1 for p, t in zip(plain, traced))
    mp, mt = statistics.median(plain), statistics.median(traced)
    return (f"{label}: plain {mp:.3f} s, stepscope {mt:.3f} s  -> overhead {100 * (mt / mp - 1):+.1f}% "
            f"(pairwise {100 * statistics.median(pairs):+.1f}%, {100 * pairs[0]:+.1f}%..{100 * pairs[-1]:+.1f}%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hz", type=float, default=101.0)
    ap.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for the program (0: torch's default)")
    args = ap.parse_args()
    prog = [sys.executable, "-m", "stepscope.pipelines.demo_program", "--model", args.model, "--steps", str(args.steps)]
    if args.size:
        prog += ["--size", str(args.size)]
    store = tempfile.mkdtemp(prefix="stepscope-overhead-")
    traced_cmd = [sys.executable, "-m", "stepscope", "run", "-q", "--hz", str(args.hz), "--store", store]
    for t in demo_traces():
        traced_cmd += ["--trace", t]
    traced_cmd += ["--", *prog]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    once(prog, env)  # warm the file cache: the first import of torch is slower than the rest
    plain, traced = [], []
    for i in range(args.repeats):
        plain.append(once(prog, env))
        traced.append(once(traced_cmd, env))
        print(f"repeat {i + 1}: pipeline call plain {plain[-1][0]:.3f} s (CPU {plain[-1][1]:.3f} s)  traced "
              f"{traced[-1][0]:.3f} s (CPU {traced[-1][1]:.3f} s)  |  process wall {plain[-1][2]:.2f} s vs "
              f"{traced[-1][2]:.2f} s", flush=True)
    print(f"\n{args.model}, {args.steps} steps, {args.repeats} interleaved repeats, {args.hz:g} Hz, demo trace list, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    for k, label in ((0, "pipeline call wall"), (1, "pipeline call CPU "), (2, "process wall      ")):
        print(ratio_line(label, [p[k] for p in plain], [t[k] for t in traced]))
    print("(CPU: the program's process CPU time in the call, all its threads and stepscope's in it: the figure to "
          "read on a loaded machine)")

if __name__ == "__main__":
    main()
