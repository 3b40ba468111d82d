"""Sampling fidelity and overhead: each profiler's time shares against the truth, on programs with a
known split, and its cost in run time.

Programs (written to a temp folder, each prints the true time of its functions, measured inside it):

- ``python_70_20_10``: pure-Python loops in A, B, C for 70/20/10 % of the time;
- ``torch_70_20_10``: the same split, the time inside torch matmuls (skipped without torch);
- ``burst_sleep_MS``: A (pure Python, MS ms) alternating with B (``time.sleep``, MS ms), MS in 1, 2.5, 5, 20;
- ``burst_then_c``: A (pure Python, 2 ms) before B (``zlib.compress`` of 128 KiB, GIL released, a few ms).

Each profiler's line: its median shares; the **bias**, each function's signed error (measured share - true
share) averaged over the repeats, the largest; one run's sampling **noise**, the binomial standard error of a share
with the run's number of samples (``sqrt(p (1 - p) / n)``: about 3 points for 300 samples, so a 3 s run at 101 Hz
cannot be within 2 points of the truth in every run; ``--seconds 30`` gives 3,000 samples, +-0.9 point); and the
**max error** of any single run.

Profilers, in the same command: stepscope (``stepscope run``) at 101 and 1000 Hz, pyinstrument (1 ms
interval) and py-spy (``record --nonblocking``) at 100 and 1000 Hz, where installed (``pip install
pyinstrument py-spy``: the benchmark's own set-up, not ``make test``'s). Shares are of total (inclusive)
time of A/B/C over their sum; overhead is the median wall time under the profiler over the median bare
wall time, repeats interleaved (min..max shown).

    python benchmarks/sampling_fidelity.py [--seconds 3] [--repeats 3] [--only burst_sleep_2.5,python_70_20_10] [--no-peers]

Each program does a fixed amount of work (its round count is calibrated once, bare) and times its own work
loop (wall and CPU time of the whole process), so the overhead is the sampling's cost to the program, apart
from stepscope's start-up and end of run (shown as ``cmd``).
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

COMMON = """
import json, sys, time
T = {"A": 0, "B": 0, "C": 0}
def timed(name, fn, *a):
    t0 = time.perf_counter_ns(); fn(*a); T[name] += time.perf_counter_ns() - t0
def spin(n):  # pure Python, a fixed amount of work
    x = 0
    for i in range(n):
        x += i
    return x
ROUNDS = int(sys.argv[1])
PER_MS = int(sys.argv[2])  # spin() iterations per ms on this machine (calibrated by the benchmark)
def main(body):
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(ROUNDS):
        body()
    print("WORK " + json.dumps([time.perf_counter() - w0, time.process_time() - c0]))
    print("TRUTH " + json.dumps(T))
"""

#: name -> (source, length of one round in ms)
PROGRAMS = {
    "python_70_20_10": (COMMON + """
def A(): spin(7 * PER_MS)
def B(): spin(2 * PER_MS)
def C(): spin(1 * PER_MS)
main(lambda: (timed("A", A), timed("B", B), timed("C", C)))
""", 10.0),
    "torch_70_20_10": (COMMON + """
import torch
torch.set_num_threads(1)
x = torch.randn(96, 96)
def mm(n):
    for _ in range(n):
        torch.mm(x, x)
def A(): mm(70)
def B(): mm(20)
def C(): mm(10)
main(lambda: (timed("A", A), timed("B", B), timed("C", C)))
""", None),
    "burst_then_c": (COMMON + """
import zlib, os
data = os.urandom(1 << 17)
def A(): spin(2 * PER_MS)
def B(): zlib.compress(data, 6)
main(lambda: (timed("A", A), timed("B", B)))
""", None),
}
for _ms in (1, 2.5, 5, 20):
    PROGRAMS[f"burst_sleep_{_ms}"] = (COMMON + f"""
def A(): spin(int({_ms} * PER_MS))
def B(): time.sleep({_ms / 1000})
main(lambda: (timed("A", A), timed("B", B)))
""", 2 * _ms)


def _truth(stdout: str) -> dict:
    line = [ln for ln in stdout.splitlines() if ln.startswith("TRUTH ")][-1]
    t = json.loads(line[6:])
    total = sum(t.values())
    return {k: v / total for k, v in t.items() if v}


def _shares(totals: dict, names) -> dict:
    s = sum(totals.get(n, 0.0) for n in names)
    return {n: (totals.get(n, 0.0) / s if s else 0.0) for n in names}


def _work(stdout: str) -> tuple[float, float]:
    line = [ln for ln in stdout.splitlines() if ln.startswith("WORK ")][-1]
    wall, cpu = json.loads(line[5:])
    return wall, cpu


class Result:
    """One run: command wall time (s), the program's own work wall and CPU time (s), true shares, measured
    totals per function (wall, and CPU where the profiler gives it)."""

    def __init__(self, cmd_wall, stdout, totals, cpu_totals=None, samples=0.0):
        self.samples = samples  # how many samples fell in A, B, C
        self.cmd_wall = cmd_wall
        self.work_wall, self.work_cpu = _work(stdout)
        self.truth = _truth(stdout)
        self.totals = totals
        self.cpu_totals = cpu_totals


def _args(prog: Path, rounds: int, per_ms: int) -> list[str]:
    return [sys.executable, str(prog), str(rounds), str(per_ms)]


def run_bare(prog: Path, rounds: int, per_ms: int, tmp: Path) -> Result:
    t0 = time.perf_counter()
    p = subprocess.run(_args(prog, rounds, per_ms), capture_output=True, text=True, check=True)
    return Result(time.perf_counter() - t0, p.stdout, None)


def run_stepscope(prog: Path, rounds: int, per_ms: int, hz: int, tmp: Path) -> Result:
    store = tmp / f"store-{hz}-{time.monotonic_ns()}"
    env = dict(os.environ, STEPSCOPE_STORE=str(store))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "--hz", str(hz), "--", *_args(prog, rounds, per_ms)],
                       capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - t0
    from stepscope.analysis.calltree import ProfileIndex
    from stepscope.store import Store
    from stepscope.store.reader import load_run

    data = load_run(Store(store))
    index = ProfileIndex(data.profile)
    out = []
    for mode in ("wall", "cpu"):
        _, total = index.function_times(index.select(), mode)
        out.append({f.name.rsplit(".", 1)[-1]: float(total[i]) for i, f in enumerate(index.functions)
                    if f.name.startswith("__main__.") and f.name.rsplit(".", 1)[-1] in ("A", "B", "C")})
    shutil.rmtree(store, ignore_errors=True)
    return Result(wall, p.stdout, out[0], out[1] if index.has_cpu else None, sum(out[0].values()) / 1e9 * hz)


def run_pyinstrument(prog: Path, rounds: int, per_ms: int, tmp: Path) -> Result:
    out = tmp / f"pyi-{time.monotonic_ns()}.json"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pyinstrument", "-i", "0.001", "-r", "json", "-o", str(out),
                        *_args(prog, rounds, per_ms)[1:]], capture_output=True, text=True, check=True)
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
    return Result(wall, p.stdout, totals, samples=sum(totals.values()) * 1000)


def run_pyspy(prog: Path, rounds: int, per_ms: int, hz: int, tmp: Path) -> Result:
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out = tmp / f"pyspy-{time.monotonic_ns()}.txt"
    t0 = time.perf_counter()
    p = subprocess.run([exe, "record", "--nonblocking", "--idle", "--rate", str(hz), "--format", "raw", "-o", str(out),
                        "--", *_args(prog, rounds, per_ms)], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    totals: dict = {}
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        for fn in ("A", "B", "C"):
            if any(fr.startswith(f"{fn} (") for fr in stack.split(";")):
                totals[fn] = totals.get(fn, 0.0) + float(count)
                break
    return Result(wall, p.stdout, totals, samples=sum(totals.values()))


def calibrate_per_ms(tmp: Path) -> int:
    """spin() iterations per ms on this machine."""
    code = ("import time\nn=2_000_000\nt=time.perf_counter()\nx=0\nfor i in range(n):\n    x += i\n"
            "print(int(n / ((time.perf_counter()-t)*1000)))")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def rounds_for(prog: Path, per_ms: int, seconds: float, tmp: Path) -> int:
    probe = 30
    r = run_bare(prog, probe, per_ms, tmp)
    return max(1, int(seconds / (r.work_wall / probe)))


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default=None, help="comma-separated program names")
    ap.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True, help="also pyinstrument, py-spy")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stepscope-fidelity-"))
    profilers = [("stepscope 101 Hz", lambda p, r, k: run_stepscope(p, r, k, 101, tmp)),
                 ("stepscope 1000 Hz", lambda p, r, k: run_stepscope(p, r, k, 1000, tmp))]
    if args.peers:
        try:
            import pyinstrument  # noqa: F401

            profilers.append(("pyinstrument 1 ms", lambda p, r, k: run_pyinstrument(p, r, k, tmp)))
        except ImportError:
            print("(pyinstrument not installed: pip install pyinstrument)")
        if shutil.which("py-spy") or Path(sys.executable).with_name("py-spy").exists():
            profilers += [("py-spy 100 Hz", lambda p, r, k: run_pyspy(p, r, k, 100, tmp)),
                          ("py-spy 1000 Hz", lambda p, r, k: run_pyspy(p, r, k, 1000, tmp))]
    try:
        import torch  # noqa: F401
    except ImportError:
        PROGRAMS.pop("torch_70_20_10")
    per_ms = calibrate_per_ms(tmp)
    only = set(args.only.split(",")) if args.only else None
    print(f"each program ~{args.seconds:g} s of work, {args.repeats} interleaved repeats; 'work' = the program's own "
          "timing of its work loop (wall, CPU incl. all threads) under the profiler / bare, median (min..max); "
          "'cmd' = the whole command's wall time / bare")
    for name, (source, _) in PROGRAMS.items():
        if only and name not in only:
            continue
        prog = tmp / f"{name}.py"
        prog.write_text(source)
        rounds = rounds_for(prog, per_ms, args.seconds, tmp)
        bare, runs = [], {p: [] for p, _ in profilers}
        for _ in range(args.repeats):  # interleaved
            bare.append(run_bare(prog, rounds, per_ms, tmp))
            for pname, fn in profilers:
                try:
                    runs[pname].append(fn(prog, rounds, per_ms))
                except subprocess.CalledProcessError as e:
                    print(f"  {pname}: failed ({(e.stderr or '')[-200:].strip()})")
        truth = bare[-1].truth
        names = sorted(truth)
        print(f"\n{name}: truth " + "  ".join(f"{n} {100 * truth[n]:.1f}%" for n in names))
        b_wall = _med([r.work_wall for r in bare])
        b_cpu = _med([r.work_cpu for r in bare])
        b_cmd = _med([r.cmd_wall for r in bare])
        for pname in runs:
            rs = runs[pname]
            if not rs:
                continue
            shares = [_shares(r.totals, names) for r in rs]
            err = max(abs(100 * (s[n] - r.truth[n])) for s, r in zip(shares, rs) for n in names)
            # the bias: each name's signed error averaged over the repeats (the largest); the noise: one run's
            # binomial standard error of a share, sqrt(p (1 - p) / samples), at the profiler's rate
            bias = {n: statistics.fmean(100 * (s[n] - r.truth[n]) for s, r in zip(shares, rs)) for n in names}
            worst = max(names, key=lambda n: abs(bias[n]))
            samples = _med([r.samples for r in rs])
            noise = max(100 * (truth[n] * (1 - truth[n]) / max(samples, 1)) ** 0.5 for n in names)
            shown = "  ".join(f"{n} {100 * statistics.median(s[n] for s in shares):.1f}%" for n in names)
            ww = [r.work_wall / b_wall for r in rs]
            wc = [r.work_cpu / b_cpu for r in rs]
            cmd = [r.cmd_wall / b_cmd for r in rs]
            line = (f"  {pname:18} {shown}   bias {bias[worst]:+4.1f} pt ({worst}, mean of {len(rs)}; one run's noise "
                    f"+-{noise:.1f} pt, {samples:.0f} samples)   max error {err:4.1f} pt   work wall x{_med(ww):.3f} ({min(ww):.3f}..{max(ww):.3f})"
                    f"  cpu x{_med(wc):.3f} ({min(wc):.3f}..{max(wc):.3f})  cmd x{_med(cmd):.3f}")
            if rs[0].cpu_totals is not None:
                cs = [_shares(r.cpu_totals, names) for r in rs]
                line += "   CPU view " + " ".join(f"{n} {100 * statistics.median(c[n] for c in cs):.0f}%" for n in names)
            print(line, flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
