"""stepscope's device analysis against Holistic Trace Analysis (HTA) on the same Kineto trace.

Prints load + analysis time of both and the idle time breakdown per stream side by side. HTA (PyPI
``HolisticTraceAnalysis``, with pandas and plotly) runs in the interpreter given by ``--hta-python``
(default: this one), as a subprocess, so that stepscope's environment need not hold it:

    python -m venv ~/.cache/stepscope/hta-venv && ~/.cache/stepscope/hta-venv/bin/pip install HolisticTraceAnalysis
    python benchmarks/device_vs_hta.py ../shared/traces/v100_training_rank0.json.gz --hta-python ~/.cache/stepscope/hta-venv/bin/python
    python benchmarks/device_vs_hta.py --copies 38 --hta-python ...   # ~2.6M events (benchmarks/large_trace.py)
    python benchmarks/device_vs_hta.py --copies 3 --hta-python ...    # ~206k events

Also, in the same interleaved rounds: the parse floor (the file gunzipped and parsed whole by simdjson, when pysimdjson
is installed, else orjson) and ``stepscope device`` with its msgspec reader (``STEPSCOPE_KSCAN=0``, no C scanner).

Each side runs in its own process, so its peak memory (ru_maxrss) is its own; the whole-command figures include
interpreter start and imports.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HTA_SCRIPT = r"""
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df, _ = ta.get_idle_time_breakdown(visualize=False)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "idle_s": t3 - t2,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": df[["stream", "idle_category", "idle_time"]].astype({"stream": int}).to_dict("records")}))
"""

MINE_SCRIPT = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from stepscope.device.analysis import idle_breakdown
from stepscope.device.kineto import load
t1 = time.perf_counter()
trace = load(sys.argv[1])
t2 = time.perf_counter()
streams, _ = idle_breakdown(trace)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "idle_s": t3 - t2, "events": len(trace),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": [{"stream": s.stream, "host_wait": s.host_wait_ns, "kernel_wait": s.kernel_wait_ns,
                            "other": s.other_ns, "idle": s.idle_ns} for s in streams]}))
"""

#: the whole `stepscope device TRACE` command, with its peak memory
WHOLE_SCRIPT = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": time.perf_counter() - t0, "rc": r.returncode, "err": r.stderr[-500:],
                  "cpu_s": ru.ru_utime + ru.ru_stime, "peak_mb": ru.ru_maxrss / 1024}))
"""


#: the parse floor: the file gunzipped (``device.rawread.gunzip``: one buffer of its final size) and parsed whole by
#: the fastest JSON parser here (simdjson's tape when pysimdjson is installed, else orjson into Python objects)
FLOOR_SCRIPT = r"""
import json, sys, time
from pathlib import Path
from stepscope.device.rawread import gunzip
data = Path(sys.argv[1]).read_bytes()
t0 = time.perf_counter()
raw = gunzip(data) if data[:2] == b"\x1f\x8b" else data
t1 = time.perf_counter()
try:
    import simdjson
    doc, parser = simdjson.Parser().parse(raw), "simdjson"
except ImportError:
    import orjson
    doc, parser = orjson.loads(raw), "orjson"
t2 = time.perf_counter()
print(json.dumps({"gunzip_s": t1 - t0, "parse_s": t2 - t1, "parser": parser}))
"""


def _json_run(cmd: list[str]) -> dict | None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(f"  failed: {' '.join(cmd[:3])}...: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=None, help="a trace file (default: the V100 trace, or --copies)")
    ap.add_argument("--copies", type=int, default=None,
                    help="replicate the V100 trace this many times (benchmarks/large_trace.py; 38: ~2.6M events)")
    ap.add_argument("--hta-python", default=sys.executable)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved whole-command runs of each side")
    args = ap.parse_args()
    if args.copies:  # built in a child: Linux's ru_maxrss of a process started from this one would count this
        # process's memory (building 38 copies took 1.9 GB here, which read as stepscope's peak)
        out = subprocess.run([sys.executable, str(Path(__file__).parent / "large_trace.py"), "--copies", str(args.copies)],
                             capture_output=True, text=True, check=True).stdout
        path = out.split()[0]
    else:
        path = args.trace or str(Path(__file__).resolve().parents[2] / "shared/traces/v100_training_rank0.json.gz")
    mine = _json_run([sys.executable, "-c", MINE_SCRIPT, path])
    hta = None
    wholes, hta_wholes, floors, plain = [], [], [], []
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, Path(d) / Path(path).name)
        hta = _json_run([args.hta_python, "-c", HTA_SCRIPT, d])
        for _ in range(args.repeats):  # interleaved: both sides see the same machine
            w = _json_run([sys.executable, "-c", WHOLE_SCRIPT, sys.executable, "-m", "stepscope", "device", path, "--json"])
            if w:
                wholes.append(w)
            f = _json_run([sys.executable, "-c", FLOOR_SCRIPT, path])
            if f:
                floors.append(f)
            w = _json_run([sys.executable, "-c", WHOLE_SCRIPT, "env", "STEPSCOPE_KSCAN=0", sys.executable, "-m",
                           "stepscope", "device", path, "--json"])  # the msgspec reader (no C scanner), for comparison
            if w:
                plain.append(w)
            if hta is not None:
                w = _json_run([sys.executable, "-c", WHOLE_SCRIPT, args.hta_python, "-c", HTA_SCRIPT, d])
                if w:
                    hta_wholes.append(w)
    med = lambda rows, k: statistics.median(r[k] for r in rows) if rows else float("nan")  # noqa: E731
    whole = {"wall_s": med(wholes, "wall_s"), "cpu_s": med(wholes, "cpu_s"), "peak_mb": med(wholes, "peak_mb")} if wholes else None
    if hta is not None:
        hta["whole_s"], hta["whole_cpu_s"] = med(hta_wholes, "wall_s"), med(hta_wholes, "cpu_s")
        hta["whole_peak_mb"] = med(hta_wholes, "peak_mb")
    print(f"{Path(path).name}: {mine['events'] if mine else '?'} complete events")
    if floors and whole:
        fl = med(floors, "gunzip_s") + med(floors, "parse_s")
        print(f"parse floor: gunzip {med(floors, 'gunzip_s'):.2f} s + {floors[0]['parser']} parse "
              f"{med(floors, 'parse_s'):.2f} s = {fl:.2f} s; whole `stepscope device` / floor = {whole['wall_s'] / fl:.2f}x"
              + (f"; with the msgspec reader (STEPSCOPE_KSCAN=0) {med(plain, 'wall_s'):.2f} s, "
                 f"{med(plain, 'wall_s') / fl:.2f}x, peak {med(plain, 'peak_mb'):.0f} MB" if plain else ""))
    if mine:
        print(f"stepscope: load {mine['load_s']:.2f} s, idle breakdown {mine['idle_s']:.2f} s, peak {mine['peak_mb']:.0f} MB"
              + (f"; whole `stepscope device` command {whole['wall_s']:.2f} s (CPU {whole['cpu_s']:.2f} s), peak "
                 f"{whole['peak_mb']:.0f} MB" if whole else ""))
    if hta:
        print(f"HTA:       load {hta['load_s']:.2f} s, idle breakdown {hta['idle_s']:.2f} s, peak {hta['peak_mb']:.0f} MB "
              f"(import {hta['import_s']:.1f} s); whole script {hta['whole_s']:.2f} s (CPU {hta['whole_cpu_s']:.2f} s), "
              f"peak {hta['whole_peak_mb']:.0f} MB")
    if mine and hta:
        print(f"load + idle breakdown: HTA / stepscope = {(hta['load_s'] + hta['idle_s']) / (mine['load_s'] + mine['idle_s']):.1f}x "
              f"faster; peak memory stepscope / HTA = {mine['peak_mb'] / hta['peak_mb']:.2f}")
        if whole:
            print(f"whole command (median of {args.repeats} interleaved): HTA script / `stepscope device` = "
                  f"{hta['whole_s'] / whole['wall_s']:.1f}x wall, {hta['whole_cpu_s'] / whole['cpu_s']:.1f}x CPU "
                  f"(load average {os.getloadavg()[0]:.1f}: on a loaded machine read CPU); peak memory "
                  f"`stepscope device` / HTA script = {whole['peak_mb'] / hta['whole_peak_mb']:.2f}")
    print("\nidle time per stream       stepscope (ns)             HTA (whole us: by default HTA rounds each event's start"
          " up and end down to whole us, widening every gap; HTA_DISABLE_NS_ROUNDING=1 gives stepscope's figures, as"
          " benchmarks/gpu_checks.py's check 2b runs it)")
    hta_rows = {(r["stream"], r["idle_category"]): r["idle_time"] for r in (hta or {}).get("rows", [])}
    for s in (mine or {}).get("rows", []):
        theirs_total = sum(v for (st, _), v in hta_rows.items() if st == s["stream"]) or 1.0
        for cat in ("host_wait", "kernel_wait", "other"):
            m, theirs = s[cat], hta_rows.get((s["stream"], cat))
            col = "" if theirs is None else f"{theirs:10.0f} us ({100 * theirs / theirs_total:4.1f}%)"
            print(f"  stream {s['stream']:<3} {cat:<12} {m / 1e3:10.0f} us ({100 * m / max(s['idle'], 1):4.1f}%)   {col}")


if __name__ == "__main__":
    main()
