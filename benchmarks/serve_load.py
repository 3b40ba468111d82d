"""Ingest throughput of `stepscope serve`: concurrent clients posting Sentry envelopes (a transaction of
50 spans and its sampled v1 profile of 200 samples, gzip, as the Python SDK sends them) to a real server
process; every envelope must be stored (0 lost). Ratio: each concurrency against one client.

    python benchmarks/serve_load.py [--clients 1,4,16] [--envelopes 400]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path

from _serve import serving

from stepscope.store.db import Store


def make_envelope(eid: str, start: float) -> bytes:
    spans = [{"span_id": f"{i + 2:016x}", "parent_span_id": f"{1:016x}", "op": "function",
              "description": "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
              "start_timestamp": start + i * 0.01, "timestamp": start + i * 0.01 + 0.009,
              "data": {"thread.id": "140000", "thread.name": "MainThread"}} for i in range(50)]
    tx = {"type": "transaction", "event_id": eid, "transaction": "txt2img", "start_timestamp": start,
          "timestamp": start + 0.5, "platform": "python", "spans": spans,
          "contexts": {"trace": {"trace_id": uuid.uuid4().hex, "span_id": f"{1:016x}", "op": "task",
                                 "data": {"thread.id": "140000"}}}}
    frames = [{"function": f"f{i}", "module": f"mod{i % 7}", "abs_path": f"/app/mod{i % 7}.py", "lineno": i} for i in range(60)]
    stacks = [[(j * 7 + k) % 60 for k in range(25)] for j in range(40)]
    prof = {"version": "1", "platform": "python", "timestamp": start, "transactions": [{"id": eid, "name": "txt2img"}],
            "profile": {"frames": frames, "stacks": stacks,
                        "samples": [{"elapsed_since_start_ns": str(k * 2_500_000), "thread_id": "140000", "stack_id": k % 40}
                                    for k in range(200)],
                        "thread_metadata": {"140000": {"name": "MainThread"}}}}
    items = [b'{"event_id":"%s"}' % eid.encode()]
    for t, doc in (("transaction", tx), ("profile", prof)):
        payload = json.dumps(doc).encode()
        items += [json.dumps({"type": t, "length": len(payload)}).encode(), payload]
    return gzip.compress(b"\n".join(items) + b"\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--envelopes", type=int, default=400, help="envelopes per concurrency level")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, serving(Path(d) / "store") as (port, key):
        store = Path(d) / "store"
        headers = {"X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7", "Content-Encoding": "gzip",
                   "Content-Type": "application/x-sentry-envelope"}
        base = None
        print(f"{'clients':>8} {'envelopes':>10} {'seconds':>8} {'env/s':>8} {'vs 1':>6} {'lost':>5}")
        for n in [int(x) for x in args.clients.split(",")]:
            bodies = [make_envelope(uuid.uuid4().hex, 1_795_000_000.0 + k) for k in range(args.envelopes)]
            before = Store(store).conn.execute("SELECT count(*) FROM runs").fetchone()[0]
            bad = []

            def worker(part):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                for b in part:
                    c.request("POST", "/api/1/envelope/", body=b, headers=headers)
                    r = c.getresponse()
                    r.read()
                    if r.status != 200:
                        bad.append(r.status)
                c.close()

            threads = [threading.Thread(target=worker, args=(bodies[i::n],)) for i in range(n)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            dt = time.perf_counter() - t0
            stored = Store(store).conn.execute("SELECT count(*) FROM runs").fetchone()[0] - before
            rate = args.envelopes / dt
            base = base or rate
            print(f"{n:>8} {args.envelopes:>10} {dt:>8.2f} {rate:>8.0f} {rate / base:>6.2f} {args.envelopes - stored:>5}"
                  + (f"  non-200: {len(bad)}" if bad else ""))


if __name__ == "__main__":
    main()
