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
    store = tempfile.mkdtemp(prefix="stepscope-overhead-")
    traced = [sys.executable, "-m", "stepscope", "run", "-q", "--hz", str(args.hz), "--store", store]
    for t in demo_traces():
        traced += ["--trace", t]
    traced += ["--", *prog]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    once(prog, env)  # warm the file cache: the first import of torch is slower than the rest
    plain_pipe, plain_wall, tr_pipe, tr_wall = [], [], [], []
    for i in range(args.repeats):
        p, w = once(prog, env)
        plain_pipe.append(p)
        plain_wall.append(w)
        p, w = once(traced, env)
        tr_pipe.append(p)
        tr_wall.append(w)
        print(f"repeat {i + 1}: plain pipeline {plain_pipe[-1]:.3f} s  traced {tr_pipe[-1]:.3f} s  |  "
              f"wall {plain_wall[-1]:.2f} s vs {tr_wall[-1]:.2f} s", flush=True)
    mp, mt = statistics.median(plain_pipe), statistics.median(tr_pipe)
    wp, wt = statistics.median(plain_wall), statistics.median(tr_wall)
    print(f"\n{args.model}, {args.steps} steps, {args.repeats} interleaved repeats, {args.hz:g} Hz, demo trace list")
    print(f"pipeline call: plain {mp:.3f} s, stepscope {mt:.3f} s  -> overhead {100 * (mt / mp - 1):+.1f}%")
    print(f"process wall:  plain {wp:.2f} s, stepscope {wt:.2f} s  -> overhead {100 * (wt / wp - 1):+.1f}%")


if __name__ == "__main__":
    main()
