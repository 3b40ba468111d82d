"""Scale of the span side: runs of N traced calls through ``stepscope run``, then ``report``, ``explain`` and
``export`` on them, and ``diff`` against a second run of the same program; wall time and peak RSS of each command
(a subprocess), the report's size and, with
Playwright and ``/usr/bin/chromium``, the time the report takes to draw.

The traced program (written here) calls ``__main__.batch`` N/10 times, each calling ``__main__.item`` 9 times
(N spans in all); every 50,000th item sleeps 2 ms (slow repeats to find). The long run spreads its calls over
``--long`` seconds (sampled all along: its profile is large). The flat shape (``--flat``) is one name repeated:
``def f(): pass`` called N times in a loop (``--trace __main__.f``: N sibling spans under the root, every one a
repeat for ``explain`` and the report's explanation). The memory lane is on in every case (the default).
"end of run" is the time from the program's last line (it writes ``time.time()`` to a file) to ``stepscope
run``'s exit: the child's last flush, the parent's load, summary and print.

    python benchmarks/scale_spans.py                         # 10k, 100k, 1M, a 60 s long run, 1M flat repeats
    python benchmarks/scale_spans.py --sizes 10000 100000 --long 0 --flat
    python benchmarks/scale_spans.py --sizes --long 0 --flat 1000000 --no-browser   # only the million repeats
    python benchmarks/scale_spans.py --sizes 10000000 --long 0 --flat --ten 10000000   # issue 42's 10M spans
    python benchmarks/scale_spans.py --baseline /tmp/base/src  # the same, also with the stepscope under that src/

``--baseline SRC`` runs every command a second time with ``PYTHONPATH=SRC`` (another checkout's ``src/``, e.g.
``git archive main src | tar -x -C /tmp/base``) and prints both columns and their ratio.
Targets (issue 15): end of a 1M-span run <= 3 s and <= 300 MB; report, explain, export at 1M <= 5 s and
<= 500 MB each, the report file <= 10 MB and drawn in <= 2 s; the same for 1M flat repeats (printed under the
table).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROGRAM = r'''
import sys, time

def item(i):
    if i % 50_000 == 49_999:
        time.sleep(0.002)
    return i * 2

def batch(k):
    t = 0
    for j in range(9):
        t += item(k * 9 + j)
    return t

def main():
    n, seconds = int(sys.argv[1]), float(sys.argv[2])
    batches = n // 10
    if seconds > 0:
        t0 = time.perf_counter()
        per = max(batches // 1000, 1)
        for k in range(batches):
            batch(k)
            if k % per == 0:  # spread the calls over the run
                target = t0 + seconds * k / batches
                while time.perf_counter() < target:
                    sum(range(2000))
        while time.perf_counter() < t0 + seconds:
            sum(range(2000))
    else:
        for k in range(batches):
            batch(k)
    with open(sys.argv[3], "w") as f:
        f.write(repr(time.time()))

main()
'''

TEN_PROGRAM = r'''
import sys, time

def f0(): pass
def f1(): pass
def f2(): pass
def f3(): pass
def f4(): pass
def f5(): pass
def f6(): pass
def f7(): pass
def f8(): pass
def f9(): pass

def main():
    fs = (f0, f1, f2, f3, f4, f5, f6, f7, f8, f9)
    for _ in range(int(sys.argv[1]) // 10):
        for f in fs:
            f()
    with open(sys.argv[3], "w") as fh:
        fh.write(repr(time.time()))

main()
'''

FLAT_PROGRAM = r'''
import sys, time

def f():
    pass

def main():
    for _ in range(int(sys.argv[1])):
        f()
    with open(sys.argv[3], "w") as fh:
        fh.write(repr(time.time()))

main()
'''

TARGETS = ("targets (issue 15, at 1M): end of run <= 3 s, <= 300 MB; report, explain, export <= 5 s, <= 500 MB each; "
           "report file <= 10 MB, drawn in <= 2 s. (issue 42, at 10M: end of run <= 10 s, <= 500 MB in the recorder; "
           "report <= 10 s, its file <= 10 MB, drawn in <= 3 s; explain and diff <= 5 s)")

# runs a command, prints "<start> <end> <peak RSS KiB of its largest process> <stdout bytes> <peak RSS KiB of the
# traced program>": the program (a grandchild: `python -m stepscope.record.launch PROGRAM ...`, PROGRAM argv[2]) is
# watched through /proc every 20 ms (its VmHWM, the kernel's high-water mark: only growth in its last 20 ms is missed)
WRAPPER = r'''
import os, resource, subprocess, sys, threading, time
prog, peak, done = sys.argv[2], [0], threading.Event()
def watch():
    while not done.wait(0.02):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                if prog.encode() in args and b"run" not in args:  # (the launched program, not `stepscope run`)
                    for line in open(f"/proc/{pid}/status"):
                        if line.startswith("VmHWM:"):
                            peak[0] = max(peak[0], int(line.split()[1]))
            except OSError:
                pass
threading.Thread(target=watch, daemon=True).start()
t0 = time.time()
p = subprocess.run(sys.argv[3:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
t1 = time.time()
done.set()
if p.returncode:
    sys.stderr.write(p.stderr.decode(errors="replace")[-2000:])
    sys.exit(p.returncode)
open(sys.argv[1], "wb").write(p.stdout)
print(t0, t1, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, len(p.stdout), peak[0])
'''


def measure(cmd: list[str], env: dict, out: Path, prog: Path | None = None) -> tuple[float, float, float, int]:
    """``(start, end, peak MiB, stdout bytes)`` of ``cmd`` run in a fresh process (its own RUSAGE_CHILDREN); with
    ``prog``, the traced program's own peak (MiB, its recorder's included) is in ``PROGRAM_PEAK[0]``."""
    p = subprocess.run([sys.executable, "-c", WRAPPER, str(out), str(prog or "-"), *cmd], env=env,
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    t0, t1, kib, nbytes, prog_kib = p.stdout.split()
    PROGRAM_PEAK[0] = int(prog_kib) / 1024
    return float(t0), float(t1), int(kib) / 1024, int(nbytes)


PROGRAM_PEAK = [0.0]


def draw_ms(html: Path) -> float | None:
    """Milliseconds from navigation to the report's first full drawing in headless Chromium (None without
    Playwright/Chromium, or when it did not draw within 120 s)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path("/usr/bin/chromium").exists():
        return None
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path="/usr/bin/chromium")
        try:
            page = b.new_page(viewport={"width": 1400, "height": 900})
            t0 = time.perf_counter()
            page.goto(html.as_uri(), timeout=120_000)
            page.wait_for_function("window.stepscopeReport && window.stepscopeReport.frameCount() >= 0",
                                   timeout=120_000, polling=20)
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            return 1e3 * (time.perf_counter() - t0)
        except Exception:
            return None
        finally:
            b.close()


def bench(label: str, stepscope: list[str], env: dict, work: Path, n: int, seconds: float, hz: float,
          browser: bool, flat: bool | str = False) -> dict:
    """The commands' figures for one case; ``flat``: False (the tree), True (one name) or "ten" (ten names)."""
    store = work / f"store-{label}-{n}-{int(seconds)}{'-' + str(flat) if flat else ''}"
    shutil.rmtree(store, ignore_errors=True)
    prog = work / ("ten.py" if flat == "ten" else "flat.py" if flat else "calls.py")
    prog.write_text(TEN_PROGRAM if flat == "ten" else FLAT_PROGRAM if flat else PROGRAM)
    done = work / "done.txt"
    res: dict = {}
    base = [*stepscope]
    traces = ([x for k in range(10) for x in ("-t", f"__main__.f{k}")] if flat == "ten" else
              ["-t", "__main__.f"] if flat else ["-t", "__main__.batch", "-t", "__main__.item"])
    run = [*base, "run", "--store", str(store), "--hz", str(hz), *traces, "--",
           sys.executable, str(prog), str(n), str(seconds), str(done)]
    t0, t1, mib, _ = measure(run, env, work / "stdout", prog)
    prog_end = float(done.read_text())
    res["end of run"] = (t1 - prog_end, mib, None)
    res["the recorder's process"] = (None, PROGRAM_PEAK[0], None)  # (the program's peak: its recorder's)
    k = len(base) + 1
    _, t1j, mibj, nj = measure(run[:k] + ["--json"] + run[k:], env, work / "stdout")
    res["run --json"] = (t1j - float(done.read_text()), mibj, nj)
    html = work / f"r-{label}-{n}{'-' + str(flat) if flat else ''}.html"
    t0, t1, mib, _ = measure([*base, "report", "--store", str(store), "-o", str(html)], env, work / "stdout")
    res["report"] = (t1 - t0, mib, html.stat().st_size)
    t0, t1, mib, nb = measure([*base, "explain", "--store", str(store)], env, work / "stdout")
    res["explain"] = (t1 - t0, mib, None)
    measure(run, env, work / "stdout")  # a second run of the same program: ``diff`` compares the two
    t0, t1, mib, _ = measure([*base, "diff", "--store", str(store)], env, work / "stdout")
    res["diff"] = (t1 - t0, mib, None)
    for fmt in ("chrome", "speedscope"):
        out = work / f"x-{label}-{n}.{fmt}.json"
        t0, t1, mib, _ = measure([*base, "export", "--store", str(store), "--format", fmt, "-o", str(out)], env,
                                 work / "stdout")
        res[f"export {fmt}"] = (t1 - t0, mib, out.stat().st_size)
        out.unlink()
    if browser:
        ms = draw_ms(html)
        res["report drawn"] = (None if ms is None else ms / 1e3, None, None)
    html.unlink()
    shutil.rmtree(store, ignore_errors=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--long", type=float, default=60.0, help="seconds of the long run (0: none)")
    ap.add_argument("--long-calls", type=int, default=300_000)
    ap.add_argument("--flat", type=int, nargs="*", default=[1_000_000],
                    help="sizes of the flat shape: one traced name called N times (none: --flat alone)")
    ap.add_argument("--ten", type=int, nargs="*", default=[],
                    help="sizes of a loop over ten traced names (N/10 calls each, N spans in all)")
    ap.add_argument("--hz", type=float, default=101.0)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout's src/ to compare with")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stepscope-scale-"))
    here = Path(__file__).resolve().parents[1] / "src"
    setups = [("this", here)] + ([("base", args.baseline.resolve())] if args.baseline else [])
    cases = ([(n, 0.0, False) for n in args.sizes] + ([(args.long_calls, args.long, False)] if args.long > 0 else [])
             + [(n, 0.0, True) for n in args.flat] + [(n, 0.0, "ten") for n in args.ten])
    results: dict = {}
    for n, seconds, flat in cases:
        for label, src in setups:  # one after the other per size: the same machine state for both
            env = {**os.environ, "PYTHONPATH": str(src)}
            results[(label, n, seconds, flat)] = bench(label, [sys.executable, "-m", "stepscope"], env, work, n, seconds,
                                                       args.hz, not args.no_browser, flat)
            print(f"... {label} {n} calls {seconds:g} s{' flat' if flat else ''} done", file=sys.stderr, flush=True)

    def cell(v):
        if v is None:
            return "-"
        s, mib, size = v
        txt = "-" if s is None else f"{s:6.2f} s"
        if mib is not None:
            txt += f" {mib:6.0f} MB"
        if size is not None:
            txt += f" {size / 1e6:7.2f} MB out"
        return txt

    hdr = "| case | work | " + " | ".join(lbl for lbl, _ in setups) + (" | ratio (time, peak) |" if args.baseline else " |")
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for n, seconds, flat in cases:
        case = ((f"{n:,} calls of ten names" if flat == "ten" else f"{n:,} repeats of one name" if flat else
                 f"{n:,} spans") + (f", {seconds:g} s run" if seconds else ""))
        this = results[("this", n, seconds, flat)]
        for work_name, v in this.items():
            row = f"| {case} | {work_name} | {cell(v)}"
            if args.baseline:
                b = results[("base", n, seconds, flat)].get(work_name)
                row += f" | {cell(b)}"
                if b and v[0] and b[0]:
                    row += f" | {v[0] / b[0]:.2f}x" + (f", {v[1] / b[1]:.2f}x" if v[1] and b[1] else "")
                else:
                    row += " | -"
            print(row + " |")
    print(TARGETS)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
