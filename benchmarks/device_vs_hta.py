"""stepscope's device analysis against Holistic Trace Analysis (HTA) on the same Kineto trace.

Prints load + analysis time of both and the idle time breakdown per stream side by side. HTA (PyPI
``HolisticTraceAnalysis``, with pandas and plotly) runs in the interpreter given by ``--hta-python``
(default: this one), as a subprocess, so that stepscope's environment need not hold it:

    python -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis
    python benchmarks/device_vs_hta.py ../shared/traces/v100_training_rank0.json.gz --hta-python /tmp/hta/bin/python
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stepscope.device.analysis import idle_breakdown, summarize_device
from stepscope.device.kineto import load

HTA_SCRIPT = r"""
import json, logging, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df, _ = ta.get_idle_time_breakdown(visualize=False)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "idle_s": t3 - t2,
                  "rows": df[["stream", "idle_category", "idle_time"]].astype({"stream": int}).to_dict("records")}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(Path(__file__).resolve().parents[2] / "shared/traces/v100_training_rank0.json.gz"))
    ap.add_argument("--hta-python", default=sys.executable)
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace = load(args.trace)
    t1 = time.perf_counter()
    streams, _ = idle_breakdown(trace)
    t2 = time.perf_counter()
    summarize_device(trace)
    t3 = time.perf_counter()
    print(f"{Path(args.trace).name}: {len(trace)} complete events")
    print(f"stepscope: load {1e3 * (t1 - t0):.0f} ms, idle breakdown {1e3 * (t2 - t1):.0f} ms, "
          f"full device summary {1e3 * (t3 - t1):.0f} ms")
    hta = None
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(args.trace, Path(d) / Path(args.trace).name)
        r = subprocess.run([args.hta_python, "-c", HTA_SCRIPT, d], capture_output=True, text=True)
        if r.returncode == 0:
            hta = json.loads(r.stdout.strip().splitlines()[-1])
        else:
            print(f"HTA not run ({args.hta_python}): {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    if hta:
        print(f"HTA:       load {1e3 * hta['load_s']:.0f} ms, idle breakdown {1e3 * hta['idle_s']:.0f} ms "
              f"(import {hta['import_s']:.1f} s not counted)")
        print(f"load + idle breakdown: HTA / stepscope = {(hta['load_s'] + hta['idle_s']) / (t2 - t0):.1f}x")
    print("\nidle time per stream       stepscope (ns)             HTA (whole us)")
    hta_rows = {(r["stream"], r["idle_category"]): r["idle_time"] for r in (hta or {}).get("rows", [])}
    for s in streams:
        theirs_total = sum(v for (st, _), v in hta_rows.items() if st == s.stream) or 1.0
        for cat, mine in (("host_wait", s.host_wait_ns), ("kernel_wait", s.kernel_wait_ns), ("other", s.other_ns)):
            theirs = hta_rows.get((s.stream, cat))
            col = "" if theirs is None else f"{theirs:10.0f} us ({100 * theirs / theirs_total:4.1f}%)"
            print(f"  stream {s.stream:<3} {cat:<12} {mine / 1e3:10.0f} us ({100 * mine / max(s.idle_ns, 1):4.1f}%)   {col}")
        print(f"  stream {s.stream:<3} {'total idle':<12} {s.idle_ns / 1e3:10.0f} us           "
              f"{'' if not hta else f'{theirs_total:10.0f} us'}")


if __name__ == "__main__":
    main()
