"""ns per traced call: stepscope's probes vs sentry_sdk's functions_to_trace, on a no-op function.

Prints the interpreter and the tracing mechanism (``sys.monitoring`` on 3.12+, instrumented code on 3.11;
``STEPSCOPE_TRACING=code`` forces the latter). Runs on any interpreter (``PYTHONPATH=src python3.12 ...``);
sentry_sdk is compared where it is installed.

Both tracers run in this one process, each on its own copy of the same no-op function, inside an
active transaction (Sentry records spans only inside one), with stepscope's sampler at its default
101 Hz. Figures are medians over repeats of the extra time per call against the untraced function.

    python benchmarks/tracer_overhead.py [--calls 200000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def make_module(folder: Path, name: str) -> None:
    (folder / f"{name}.py").write_text("def noop():\n    return None\n")


def per_call_ns(fn, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def measure(fn, base, calls: int, repeats: int, between=None) -> tuple[float, float]:
    extra, raw = [], []
    for _ in range(repeats):
        b = per_call_ns(base, calls)
        t = per_call_ns(fn, calls)
        extra.append(t - b)
        raw.append(t)
        if between:
            between()
    return statistics.median(extra), statistics.median(raw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stepscope-bench-"))
    for name in ("bench_plain", "bench_stepscope", "bench_sentry"):
        make_module(tmp, name)
    sys.path.insert(0, str(tmp))
    import bench_plain

    import stepscope

    session = stepscope.init(functions_to_trace=["bench_stepscope.noop"], profiles_hz=101, store=str(tmp / "store"),
                             transaction="bench")
    import bench_stepscope

    from stepscope.tracing import buffer
    from stepscope.tracing.patch import is_traced

    assert is_traced(bench_stepscope.noop), "stepscope did not trace the function"
    mech = session.patcher.mechanism.name

    s_extra, s_raw = measure(bench_stepscope.noop, bench_plain.noop, args.calls, args.repeats, between=buffer.take)
    stepscope.shutdown()
    print(f"python {sys.version.split()[0]}, mechanism {mech!r}")
    print(f"untraced no-op call:        {per_call_ns(bench_plain.noop, args.calls):8.0f} ns")
    print(f"stepscope traced call:      {s_raw:8.0f} ns  (+{s_extra:.0f} ns per call)")
    try:
        import sentry_sdk
    except ImportError:
        print("sentry_sdk not installed: pip install sentry-sdk for the comparison")
        return
    sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", traces_sample_rate=1.0,
                    functions_to_trace=[{"qualified_name": "bench_sentry.noop"}], transport=lambda *a, **k: None)
    import bench_sentry

    with sentry_sdk.start_transaction(name="bench", op="function"):
        n = max(args.calls // 10, 1000)  # Sentry keeps every span of the transaction in memory
        q_extra, q_raw = measure(bench_sentry.noop, bench_plain.noop, n, args.repeats)
    print(f"sentry_sdk {sentry_sdk.VERSION} traced call: {q_raw:8.0f} ns  (+{q_extra:.0f} ns per call)")
    print(f"ratio sentry_sdk / stepscope (extra per call): {q_extra / max(s_extra, 1):.1f}x")


if __name__ == "__main__":
    main()
