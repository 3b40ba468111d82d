"""Page load of a transaction with 10k spans in the web UI, in headless Chromium (Debian's), against the
same run's self-contained report opened from a file (the baseline: same data, same script).

The transaction (10k spans in a tree 4 deep, a sampled v1 profile) is sent to a real `stepscope serve`
as one gzip envelope, as the SDK would. Times: the server's render (Server-Timing), navigation to the
first waterfall and flame graph drawn (``stepscopeReport.readyMs``), and a span click to its flame graph.
The first load builds the view; later loads of an unchanged run reuse it (the server caches it).

    python benchmarks/ui_page_load.py [--spans 10000] [--samples 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _serve import serving

from stepscope.store.db import Store
from stepscope.store.reader import load_run

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def big_envelope(n_spans: int, n_samples: int) -> tuple[str, bytes]:
    eid = uuid.uuid4().hex
    start = 1_795_000_000.0
    dur = 20.0
    spans, k = [], 2
    per_call = n_spans // 100  # 100 pipeline-ish calls, each with steps and their children
    for c in range(100):
        c0, c1 = start + c * dur / 100, start + (c + 1) * dur / 100
        cid = f"{k:016x}"; k += 1
        spans.append({"span_id": cid, "parent_span_id": f"{1:016x}", "op": "function", "description": "app.pipeline.__call__",
                      "start_timestamp": c0, "timestamp": c1, "data": {"thread.id": "1"}})
        steps = (per_call - 1) // 3
        for s in range(steps):
            s0 = c0 + (c1 - c0) * s / steps
            s1 = s0 + (c1 - c0) / steps * 0.95
            sid = f"{k:016x}"; k += 1
            spans.append({"span_id": sid, "parent_span_id": cid, "op": "function", "start_timestamp": s0, "timestamp": s1,
                          "description": "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward", "data": {"thread.id": "1"}})
            for j, name in enumerate(("torch.nn.functional.group_norm", "torch.nn.functional.scaled_dot_product_attention")):
                spans.append({"span_id": f"{k:016x}", "parent_span_id": sid, "op": "function", "description": name,
                              "start_timestamp": s0 + (s1 - s0) * j / 2, "timestamp": s0 + (s1 - s0) * (j + 0.9) / 2,
                              "data": {"thread.id": "1"}}); k += 1
    tx = {"type": "transaction", "event_id": eid, "transaction": "big", "start_timestamp": start, "timestamp": start + dur,
          "platform": "python", "spans": spans, "contexts": {"trace": {"trace_id": uuid.uuid4().hex, "span_id": f"{1:016x}",
                                                                       "data": {"thread.id": "1"}}}}
    frames = [{"function": f"f{i}", "module": f"mod{i % 9}", "abs_path": f"/app/mod{i % 9}.py", "lineno": i} for i in range(300)]
    stacks = [[(j * 13 + q * 7) % 300 for q in range(30)] for j in range(500)]
    prof = {"version": "1", "timestamp": start, "transactions": [{"id": eid}],
            "profile": {"frames": frames, "stacks": stacks, "thread_metadata": {"1": {"name": "MainThread"}},
                        "samples": [{"elapsed_since_start_ns": str(int(dur * 1e9 * q / n_samples)), "thread_id": "1",
                                     "stack_id": q % 500} for q in range(n_samples)]}}
    parts = [b"{}"]
    for t, doc in (("transaction", tx), ("profile", prof)):
        p = json.dumps(doc).encode()
        parts += [json.dumps({"type": t, "length": len(p)}).encode(), p]
    return eid, gzip.compress(b"\n".join(parts) + b"\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as d, serving(Path(d) / "store") as (port, key):
        store = Path(d) / "store"
        _, body = big_envelope(args.spans, args.samples)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        t0 = time.perf_counter()
        c.request("POST", "/api/1/envelope/", body=body, headers={"X-Sentry-Auth": f"Sentry sentry_key={key}",
                                                                   "Content-Encoding": "gzip"})
        r = c.getresponse()
        res = json.loads(r.read())
        print(f"ingest: one envelope of {len(body) / 1e6:.1f} MB gzip: {1e3 * (time.perf_counter() - t0):.0f} ms "
              f"(HTTP {r.status}, {res['samples']} samples)")
        run_id = res["runs"][0]
        n = load_run(Store(store), run_id)
        print(f"run {run_id}: {len(n.spans)} spans, {len(n.profile)} samples")
        report = Path(d) / "report.html"
        subprocess.run([sys.executable, "-m", "stepscope", "report", run_id, "-o", str(report)],
                       env={**os.environ, "STEPSCOPE_STORE": str(store)}, check=True, capture_output=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            results: dict[str, list[float]] = {"server render (first: view built)": [], "server render": [],
                                               "web UI: first load to first draw": [], "web UI: load to first draw": [],
                                               "report file: load to first draw": [], "web UI: span click to flame graph": []}
            for rep in range(args.repeats + 1):
                for label, url in (("web UI", f"http://127.0.0.1:{port}/runs/{run_id}"), ("report file", report.as_uri())):
                    page.goto("about:blank")
                    resp = page.goto(url)
                    page.wait_for_function("window.stepscopeReport && stepscopeReport.readyMs > 0")
                    ready = page.evaluate("stepscopeReport.readyMs")
                    if label == "web UI" and rep == 0:
                        results["web UI: first load to first draw"].append(ready)
                    elif rep > 0:
                        results[f"{label}: load to first draw"].append(ready)
                    if label == "web UI":
                        st = resp.headers.get("server-timing", "")
                        results["server render (first: view built)" if rep == 0 else "server render"].append(
                            float(st.split("dur=")[1]) if "dur=" in st else float("nan"))
                        t = page.evaluate("""() => { const i = stepscopeReport.findSpan('UNet2DConditionModel.forward', 500);
                            const t0 = performance.now(); stepscopeReport.selectSpan(i); return performance.now() - t0; }""")
                        results["web UI: span click to flame graph"].append(t)
            browser.close()
        base = statistics.median(results["report file: load to first draw"])
        for k, v in results.items():
            m = statistics.median(v)
            print(f"{k:>36}: median {m:7.1f} ms  (min {min(v):.1f}, max {max(v):.1f}, n={len(v)})"
                  + (f"  {m / base:.2f}x the report file" if k.startswith("web UI: load") else ""))

if __name__ == "__main__":
    main()
