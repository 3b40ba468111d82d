"""ns per traced call, per interpreter side by side: stepscope's C recorder, its pure-Python recorder, tprof
(3.12+: sys.monitoring + a C recorder of durations only) and sentry_sdk's ``functions_to_trace``.

For each interpreter (this one, and pyenv's 3.12.1 and 3.13.0 where present) and each tracer, one child process
per try (``--tries``, best kept) times a no-op function traced against an untraced copy (the untraced call
subtracted: the figure is the time a traced call adds). stepscope runs a real session (sampler at 101 Hz) inside
its transaction; Sentry inside an active transaction (it records spans only there); a tracer that is not
installed for an interpreter reads "-" (``pip install tprof sentry-sdk`` for it). stepscope's C recorder is
built for each interpreter first (scripts/build_native.py).

Also the span duration error of each stepscope recorder: a traced function reads CLOCK_MONOTONIC_RAW (an
independent clock) at the start and end of its body; the median of (span duration - that duration) in us.

    python benchmarks/tracer_overhead.py [--calls 200000] [--repeats 7] [--tries 3]
    python benchmarks/tracer_overhead.py --child stepscope|tprof|sentry   (one measurement, JSON on stdout)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMED = """
import time
_raw = time.clock_gettime_ns
_RAW = time.CLOCK_MONOTONIC_RAW


def timed():
    t0 = _raw(_RAW)
    x = 0
    for i in range(50):
        x += i
    return _raw(_RAW) - t0
"""


def make_module(folder: Path, name: str) -> None:
    # (one blank line per letter of the name: code objects of equal content, first line number included, compare
    # equal, and tprof picks its targets by equality: the untraced copy would be traced too)
    (folder / f"{name}.py").write_text("\n" * len(name) + "def noop():\n    return None\n" + TIMED)


def per_call_ns(fn, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def measure(fn, base, calls: int, repeats: int, between=None) -> tuple[float, float]:
    """(median extra ns per call over the untraced ``base``, median ns per traced call)."""
    extra, raw = [], []
    for _ in range(repeats):
        b = per_call_ns(base, calls)
        t = per_call_ns(fn, calls)
        extra.append(t - b)
        raw.append(t)
        if between:
            between()
    return statistics.median(extra), statistics.median(raw)


def child_stepscope(tmp: Path, calls: int, repeats: int) -> dict:
    import bench_plain

    import stepscope
    from stepscope.record.spans import buffer
    from stepscope.record import native
    from stepscope.record.tracing.patch import Patcher, is_traced

    session = stepscope.init(functions_to_trace=["bench_traced.noop"], profiles_hz=101, store=str(tmp / "store"),
                             transaction="bench")
    import bench_traced

    assert is_traced(bench_traced.noop), "stepscope did not trace the function"
    mech = session.patcher.mechanism.name
    extra, raw = measure(bench_traced.noop, bench_plain.noop, calls, repeats, between=buffer.take)
    stepscope.shutdown()
    patcher = Patcher()  # (no recorder thread: the spans stay in the buffer for the error figure)
    patcher.add(["bench_traced.timed"])
    buffer.take()
    inner = [bench_traced.timed() for _ in range(2000)]
    spans = [s for s in buffer.take() if s[2] == "bench_traced.timed"]
    patcher.remove()
    assert len(spans) == len(inner), (len(spans), len(inner))
    err = statistics.median((s[5] - s[4]) - d for s, d in zip(spans, inner)) / 1000
    return {"extra": extra, "raw": raw, "mechanism": mech, "recorder": native.RECORDER, "error_us": err}


def child_tprof(tmp: Path, calls: int, repeats: int) -> dict:
    import bench_plain
    import bench_traced
    from tprof import tprof

    import io
    import contextlib

    with contextlib.redirect_stderr(io.StringIO()):  # (its report)
        with tprof(bench_traced.noop):
            extra, raw = measure(bench_traced.noop, bench_plain.noop, calls, repeats)
    return {"extra": extra, "raw": raw}


def child_sentry(tmp: Path, calls: int, repeats: int) -> dict:
    import bench_plain
    import sentry_sdk

    sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", traces_sample_rate=1.0,
                    functions_to_trace=[{"qualified_name": "bench_traced.noop"}], transport=lambda *a, **k: None)
    import bench_traced

    with sentry_sdk.start_transaction(name="bench", op="function"):
        n = max(calls // 10, 1000)  # Sentry keeps every span of the transaction in memory
        extra, raw = measure(bench_traced.noop, bench_plain.noop, n, repeats)
    return {"extra": extra, "raw": raw, "version": sentry_sdk.VERSION}


def interpreters() -> list[tuple[str, str]]:
    out = [(f"{sys.version_info[0]}.{sys.version_info[1]}", sys.executable)]
    for version, exe in (("3.12.1", "python3.12"), ("3.13.0", "python3.13")):
        path = Path.home() / ".pyenv" / "versions" / version / "bin" / exe
        if path.exists() and path.resolve() != Path(sys.executable).resolve():
            out.append((version.rsplit(".", 1)[0], str(path)))
    return out


def run_child(python: str, tracer: str, recorder: str, args) -> dict | None:
    """Best (least extra ns) of ``args.tries`` child processes; None when the tracer is missing there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["STEPSCOPE_RECORDER"] = recorder
    best = None
    for _ in range(args.tries):
        p = subprocess.run([python, __file__, "--child", tracer, "--calls", str(args.calls), "--repeats",
                            str(args.repeats)], env=env, capture_output=True, text=True, timeout=600)
        if p.returncode:
            if "ModuleNotFoundError" in p.stderr or "ImportError" in p.stderr:
                return None
            raise SystemExit(f"{tracer} on {python} failed:\n{p.stderr}")
        r = json.loads(p.stdout.splitlines()[-1])
        if best is None or r["extra"] < best["extra"]:
            best = r
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tries", type=int, default=3, help="child processes per figure (the best is kept)")
    ap.add_argument("--child", choices=["stepscope", "tprof", "sentry"])
    args = ap.parse_args()
    if args.child:
        tmp = Path(tempfile.mkdtemp(prefix="stepscope-bench-"))
        for name in ("bench_plain", "bench_traced"):
            make_module(tmp, name)
        sys.path.insert(0, str(tmp))
        fn = {"stepscope": child_stepscope, "tprof": child_tprof, "sentry": child_sentry}[args.child]
        print(json.dumps(fn(tmp, args.calls, args.repeats)))
        return
    print(f"ns added per call of a traced no-op (best of {args.tries} processes, median of {args.repeats} x "
          f"{args.calls:,} calls, the untraced call subtracted); load average {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs")
    head = ("python", "untraced", "native", "python rec.", "tprof", "sentry_sdk", "native/tprof",
            "span err native/python (us)")
    rows = []
    for version, python in interpreters():
        subprocess.run([python, str(ROOT / "scripts" / "build_native.py"), "--quiet"], check=False)
        nat = run_child(python, "stepscope", "", args)
        py = run_child(python, "stepscope", "python", args)
        tp = run_child(python, "tprof", "", args) if version != "3.11" else None
        se = run_child(python, "sentry", "", args)

        def f(r):
            return f"{r['extra']:.0f}" if r else "-"

        native_col = f(nat) if nat and nat["recorder"] == "native" else f"- ({f(nat)} python)"
        ratio = f"{nat['extra'] / tp['extra']:.2f}x" if nat and tp and nat["recorder"] == "native" else "-"
        rows.append((f"{version} ({nat['mechanism']})", f"{nat['raw'] - nat['extra']:.0f}", native_col, f(py), f(tp),
                     f(se), ratio, f"{nat['error_us']:.2f} / {py['error_us']:.2f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    for r in (head, *rows):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
