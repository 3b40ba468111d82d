"""Sampling fidelity and overhead: each profiler's time shares against the truth, on programs with a
known split, and its cost in run time.

Programs (written to a temp folder, each prints the true time of its functions, measured inside it):

- ``python_70_20_10``: pure-Python loops in A, B, C for 70/20/10 % of the time;
- ``torch_70_20_10``: the same split, the time inside torch matmuls (skipped without torch);
- ``burst_sleep_MS``: A (pure Python, MS ms) alternating with B (``time.sleep``, MS ms), MS in 1, 2.5, 5, 20;
- ``burst_then_c``: A (pure Python, 2 ms) before B (``zlib.compress``, GIL released, about 2 ms).

Profilers, in the same command: stepscope (``stepscope run``) at 101 and 1000 Hz, pyinstrument (1 ms
interval) and py-spy (``record --nonblocking``) at 100 and 1000 Hz, where installed (``pip install
pyinstrument py-spy``: the benchmark's own set-up, not ``make test``'s). Shares are of total (inclusive)
time of A/B/C over their sum; overhead is the median wall time under the profiler over the median bare
wall time, repeats interleaved (min..max shown).

    python benchmarks/sampling_fidelity.py [--seconds 3] [--repeats 3] [--only burst_sleep_2.5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMON = '''
import json, sys, time
T = {"A": 0, "B": 0, "C": 0}
def timed(name, fn, *a):
    t0 = time.perf_counter_ns(); fn(*a); T[name] += time.perf_counter_ns() - t0
def spin(ns):
    end = time.perf_counter_ns() + ns
    x = 0
    while time.perf_counter_ns() < end:
        x += 1
SECONDS = float(sys.argv[1])
'''

PROGRAMS = {
    "python_70_20_10": COMMON + '''
def A(): spin(7_000_000)
def B(): spin(2_000_000)
def C(): spin(1_000_000)
end = time.perf_counter() + SECONDS
while time.perf_counter() < end:
    timed("A", A); timed("B", B); timed("C", C)
print("TRUTH " + json.dumps(T))
''',
    "torch_70_20_10": COMMON + '''
import torch
torch.set_num_threads(1)
x = torch.randn(96, 96)
def mm(n):
    for _ in range(n):
        torch.mm(x, x)
def A(): mm(70)
def B(): mm(20)
def C(): mm(10)
end = time.perf_counter() + SECONDS
while time.perf_counter() < end:
    timed("A", A); timed("B", B); timed("C", C)
print("TRUTH " + json.dumps(T))
''',
    "burst_then_c": COMMON + '''
import zlib, os
data = os.urandom(1 << 20)
def A(): spin(2_000_000)
def B(): zlib.compress(data[: 1 << 17], 6)
end = time.perf_counter() + SECONDS
while time.perf_counter() < end:
    timed("A", A); timed("B", B)
print("TRUTH " + json.dumps(T))
''',
}
for _ms in (1, 2.5, 5, 20):
    PROGRAMS[f"burst_sleep_{_ms}"] = COMMON + f'''
def A(): spin({int(_ms * 1e6)})
def B(): time.sleep({_ms / 1000})
end = time.perf_counter() + SECONDS
while time.perf_counter() < end:
    timed("A", A); timed("B", B)
print("TRUTH " + json.dumps(T))
'''


def _truth(stdout: str) -> dict:
    line = [ln for ln in stdout.splitlines() if ln.startswith("TRUTH ")][-1]
    t = json.loads(line[6:])
    total = sum(t.values())
    return {k: v / total for k, v in t.items() if v}


def _shares(totals: dict, names) -> dict:
    s = sum(totals.get(n, 0.0) for n in names)
    return {n: (totals.get(n, 0.0) / s if s else 0.0) for n in names}


def run_bare(prog: Path, seconds: float):
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(prog), str(seconds)], capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, _truth(p.stdout), None


def run_stepscope(prog: Path, seconds: float, hz: int, tmp: Path):
    store = tmp / f"store-{hz}-{time.monotonic_ns()}"
    env = dict(os.environ, STEPSCOPE_STORE=str(store))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "--hz", str(hz), "--", sys.executable, str(prog),
                        str(seconds)], capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - t0
    from stepscope.analysis.summary import top_functions
    from stepscope.profiling.calltree import ProfileIndex
    from stepscope.store import Store

    data = Store(store).load()
    index = ProfileIndex(data.profile)
    _, by_total = top_functions(index, n=200)
    totals = {f.name.rsplit(".", 1)[-1]: f.total_ns for f in by_total if f.name.startswith("__main__.")}
    shutil.rmtree(store, ignore_errors=True)
    return wall, _truth(p.stdout), totals


def run_pyinstrument(prog: Path, seconds: float, tmp: Path):
    out = tmp / f"pyi-{time.monotonic_ns()}.json"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pyinstrument", "-i", "0.001", "-r", "json", "-o", str(out), str(prog),
                        str(seconds)], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    totals: dict = {}

    def walk(node):
        fn = node.get("function")
        if fn in ("A", "B", "C"):
            totals[fn] = totals.get(fn, 0.0) + node.get("time", 0.0)
            return
        for c in node.get("children", []):
            walk(c)

    walk(json.loads(out.read_text())["root_frame"])
    return wall, _truth(p.stdout), totals


def run_pyspy(prog: Path, seconds: float, hz: int, tmp: Path):
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out = tmp / f"pyspy-{time.monotonic_ns()}.txt"
    t0 = time.perf_counter()
    p = subprocess.run([exe, "record", "--nonblocking", "--idle", "--rate", str(hz), "--format", "raw", "-o", str(out),
                        "--", sys.executable, str(prog), str(seconds)], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    totals: dict = {}
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        for fn in ("A", "B", "C"):
            if any(fr.startswith(f"{fn} (") for fr in stack.split(";")):
                totals[fn] = totals.get(fn, 0.0) + float(count)
                break
    return wall, _truth(p.stdout), totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stepscope-fidelity-"))
    profilers = [("stepscope 101 Hz", lambda p: run_stepscope(p, args.seconds, 101, tmp)),
                 ("stepscope 1000 Hz", lambda p: run_stepscope(p, args.seconds, 1000, tmp))]
    try:
        import pyinstrument  # noqa: F401

        profilers.append(("pyinstrument 1 ms", lambda p: run_pyinstrument(p, args.seconds, tmp)))
    except ImportError:
        print("(pyinstrument not installed: pip install pyinstrument)")
    if shutil.which("py-spy") or Path(sys.executable).with_name("py-spy").exists():
        profilers += [("py-spy 100 Hz", lambda p: run_pyspy(p, args.seconds, 100, tmp)),
                      ("py-spy 1000 Hz", lambda p: run_pyspy(p, args.seconds, 1000, tmp))]
    try:
        import torch  # noqa: F401
    except ImportError:
        PROGRAMS.pop("torch_70_20_10")
    for name, source in PROGRAMS.items():
        if args.only and name != args.only:
            continue
        prog = tmp / f"{name}.py"
        prog.write_text(source)
        bare, runs, truth = [], {p: [] for p, _ in profilers}, None
        for _ in range(args.repeats):  # interleaved
            wall, truth, _ = run_bare(prog, args.seconds)
            bare.append(wall)
            for pname, fn in profilers:
                try:
                    runs[pname].append(fn(prog))
                except subprocess.CalledProcessError as e:
                    print(f"  {pname}: failed ({(e.stderr or '')[-200:].strip()})")
        names = sorted(truth)
        print(f"\n{name}: truth " + "  ".join(f"{n} {100 * truth[n]:.1f}%" for n in names))
        base = statistics.median(bare)
        for pname in runs:
            rs = runs[pname]
            if not rs:
                continue
            shares = [_shares(r[2], names) for r in rs]
            truths = [r[1] for r in rs]
            err = max(abs(100 * (s[n] - t[n])) for s, t in zip(shares, truths) for n in names)
            ratios = [r[0] / base for r in rs]
            med = statistics.median(ratios)
            shown = "  ".join(f"{n} {100 * statistics.median(s[n] for s in shares):.1f}%" for n in names)
            print(f"  {pname:18} {shown}   max error {err:4.1f} pt   run time x{med:.3f} "
                  f"({min(ratios):.3f}..{max(ratios):.3f})")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
