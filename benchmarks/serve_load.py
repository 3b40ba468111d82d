"""Ingest throughput of `stepscope serve` against Spotlight's sidecar (Sentry's local ingest, npm
``@spotlightjs/spotlight``) on the same envelopes: concurrent clients post Sentry envelopes (a transaction of 50
spans and its sampled v1 profile of 200 samples, gzip, as the Python SDK sends them) to each server in turn,
interleaved; stepscope must store every one (0 lost: runs, spans and samples counted in the store). Spotlight
keeps envelopes in memory only; its figure is the rate at which it answered 200. stepscope's writer answers once
an envelope is committed to its spool and makes the runs right after: "env/s" is the rate of 200s, "stored env/s"
the rate up to the moment the last run is in the store (both against Spotlight's).

    python benchmarks/serve_load.py [--clients 1,4,16] [--envelopes 400] [--repeats 3] [--spotlight auto|none|PATH]
    python benchmarks/serve_load.py --otlp [--clients 1,4] [--envelopes 200] [--repeats 3]

``--otlp``: OTLP/HTTP ingest (``POST /v1/traces``) against the envelope ingest of the same server, interleaved: each
OTLP request carries the envelope's 50 spans as one trace (protobuf, gzip, as the OpenTelemetry SDK's exporter sends
them; no profile: OTLP traces have none, while each envelope also carries its 200-sample profile); requests/s and
spans/s of each up to the moment the last run is stored, and OTLP's rate over the envelopes'.

``--spotlight auto`` installs the sidecar once with npm into ``~/.cache/stepscope/spotlight`` (with ``hono``
pinned to 4.12.25: with hono 4.13 its POSTs fail). Ratios: stepscope's envelopes/s over Spotlight's, per
concurrency (medians of the repeats); the issue's target is >= 1.2. Each timed part starts after a 0.3 s pause.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from _serve import serving, wait_for_port

from stepscope.store import sampleblock, spanblock
from stepscope.store.db import Store

SPOTLIGHT_DIR = Path.home() / ".cache" / "stepscope" / "spotlight"
#: a pause before each timed part, so that neither server's leftover work (a GC, a backlog) runs in the other's
QUIET_S = 0.3
SPANS, SAMPLES = 50, 200


def make_envelope(eid: str, start: float) -> bytes:
    spans = [{"span_id": f"{i + 2:016x}", "parent_span_id": f"{1:016x}", "op": "function",
              "description": "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
              "start_timestamp": start + i * 0.01, "timestamp": start + i * 0.01 + 0.009,
              "data": {"thread.id": "140000", "thread.name": "MainThread"}} for i in range(SPANS)]
    tx = {"type": "transaction", "event_id": eid, "transaction": "txt2img", "start_timestamp": start,
          "timestamp": start + 0.5, "platform": "python", "spans": spans,
          "contexts": {"trace": {"trace_id": uuid.uuid4().hex, "span_id": f"{1:016x}", "op": "task",
                                 "data": {"thread.id": "140000"}}}}
    frames = [{"function": f"f{i}", "module": f"mod{i % 7}", "abs_path": f"/app/mod{i % 7}.py", "lineno": i} for i in range(60)]
    stacks = [[(j * 7 + k) % 60 for k in range(25)] for j in range(40)]
    prof = {"version": "1", "platform": "python", "timestamp": start, "transactions": [{"id": eid, "name": "txt2img"}],
            "profile": {"frames": frames, "stacks": stacks,
                        "samples": [{"elapsed_since_start_ns": str(k * 2_500_000), "thread_id": "140000", "stack_id": k % 40}
                                    for k in range(SAMPLES)],
                        "thread_metadata": {"140000": {"name": "MainThread"}}}}
    items = [b'{"event_id":"%s"}' % eid.encode()]
    for t, doc in (("transaction", tx), ("profile", prof)):
        payload = json.dumps(doc).encode()
        items += [json.dumps({"type": t, "length": len(payload)}).encode(), payload]
    return gzip.compress(b"\n".join(items) + b"\n")


def make_otlp(start: float) -> bytes:
    """One OTLP request (protobuf, gzip) with ``make_envelope``'s spans as one trace: a root and ``SPANS`` children."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    for k, v in (("service.name", "txt2img"), ("host.name", "bench")):
        a = rs.resource.attributes.add()
        a.key, a.value.string_value = k, v
    ss = rs.scope_spans.add()
    ss.scope.name = "bench"
    trace = uuid.uuid4().bytes
    t0 = int(start * 1e9)
    spans = [(1, 0, "txt2img", t0, t0 + 500_000_000)] + [
        (i + 2, 1, "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward", t0 + i * 10_000_000,
         t0 + i * 10_000_000 + 9_000_000) for i in range(SPANS)]
    for sid, parent, name, s0, s1 in spans:
        sp = ss.spans.add()
        sp.trace_id, sp.span_id, sp.name = trace, sid.to_bytes(8, "big"), name
        if parent:
            sp.parent_span_id = parent.to_bytes(8, "big")
        sp.start_time_unix_nano, sp.end_time_unix_nano, sp.kind = s0, s1, 1
        for k, v in (("thread.id", 140000), ("thread.name", "MainThread")):
            a = sp.attributes.add()
            a.key = k
            if isinstance(v, int):
                a.value.int_value = v
            else:
                a.value.string_value = v
    return gzip.compress(req.SerializeToString())


def stored_rate(watch, before: int, n: int, t0: float) -> float:
    """Runs/s from ``t0`` until ``n`` more runs than ``before`` are in the store (30 s at most)."""
    deadline = time.time() + 30
    while watch.execute("SELECT count(*) FROM runs").fetchall()[0][0] - before < n and time.time() < deadline:
        time.sleep(0.005)
    return n / (time.perf_counter() - t0)


def otlp_main(args) -> None:
    """``--otlp``: OTLP requests against envelopes on one server (see the module)."""
    with tempfile.TemporaryDirectory() as d, serving(Path(d) / "store") as (port, key):
        store = Path(d) / "store"
        watch = Store(store).conn
        env_h = {"Content-Encoding": "gzip", "Content-Type": "application/x-sentry-envelope",
                 "X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7"}
        otlp_h = {"Content-Encoding": "gzip", "Content-Type": "application/x-protobuf",
                  "X-Sentry-Auth": f"Sentry sentry_key={key}"}
        post_all(port, "/api/1/envelope/", env_h, [make_envelope(uuid.uuid4().hex, 1_790_000_000.0 + k) for k in range(20)], 1)
        post_all(port, "/v1/traces", otlp_h, [make_otlp(1_790_000_000.0 + k) for k in range(20)], 1)
        print(f"{'clients':>8} {'requests':>9} {'env/s':>8} {'OTLP req/s':>11} {'ratio':>6} {'env spans/s':>12} "
              f"{'OTLP spans/s':>13} {'non-200':>8}  (stored; medians of {args.repeats} interleaved repeats)")
        for n in [int(x) for x in args.clients.split(",")]:
            env_r, otlp_r, bad = [], [], 0
            for r in range(args.repeats):
                for kind, out in (("env", env_r), ("otlp", otlp_r)):
                    bodies = ([make_envelope(uuid.uuid4().hex, 1_795_000_000.0 + k) for k in range(args.envelopes)]
                              if kind == "env" else [make_otlp(1_795_000_000.0 + k) for k in range(args.envelopes)])
                    before = counts(store)[0]
                    time.sleep(QUIET_S)
                    t0 = time.perf_counter()
                    _, b = post_all(port, "/api/1/envelope/" if kind == "env" else "/v1/traces",
                                    env_h if kind == "env" else otlp_h, bodies, n)
                    bad += len(b)
                    out.append(stored_rate(watch, before, args.envelopes, t0))
            e, o = statistics.median(env_r), statistics.median(otlp_r)
            print(f"{n:>8} {args.envelopes:>9} {e:>8.0f} {o:>11.0f} {o / e:>6.2f} {e * (SPANS + 1):>12.0f} "
                  f"{o * (SPANS + 1):>13.0f} {bad:>8}")
        print(f"(load average {os.getloadavg()[0]:.1f}; each request holds {SPANS + 1} spans, the root and {SPANS} "
              f"children: spans/s is requests/s x {SPANS + 1}, the ratio the same; the envelopes also hold a profile of "
              f"{SAMPLES} samples)")


def post_all(port: int, path: str, headers: dict, bodies: list[bytes], clients: int) -> tuple[float, list[int]]:
    """Post ``bodies`` over ``clients`` keep-alive connections; (seconds, non-200 statuses)."""
    bad: list[int] = []

    def worker(part):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for b in part:
            c.request("POST", path, body=b, headers=headers)
            r = c.getresponse()
            r.read()
            if r.status != 200:
                bad.append(r.status)
        c.close()

    threads = [threading.Thread(target=worker, args=(bodies[i::clients],)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, bad


def spotlight_bin(arg: str) -> Path | None:
    if arg == "none":
        return None
    if arg != "auto":
        return Path(arg)
    exe = SPOTLIGHT_DIR / "node_modules" / ".bin" / "spotlight"
    if not exe.exists():
        if shutil.which("npm") is None:
            print("npm not found: Spotlight is left out")
            return None
        SPOTLIGHT_DIR.mkdir(parents=True, exist_ok=True)
        (SPOTLIGHT_DIR / "package.json").write_text('{"name": "spotlight-bench", "private": true}\n')
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "@spotlightjs/spotlight", "hono@4.12.25"],
                           cwd=SPOTLIGHT_DIR, capture_output=True, text=True)
        if r.returncode or not exe.exists():
            print(f"npm install of Spotlight failed: Spotlight is left out\n{r.stderr[-800:]}")
            return None
    return exe


@contextlib.contextmanager
def spotlight(exe: Path):
    """Yields the port of a running Spotlight sidecar."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(exe), "server", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_for_port(port)
        yield port
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(20)


def counts(store: Path) -> tuple[int, int, int]:
    st = Store(store)
    try:
        c = st.conn
        return (c.execute("SELECT count(*) FROM runs").fetchone()[0], spanblock.count_all(c),
                sampleblock.count_all(c))
    finally:
        st.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--envelopes", type=int, default=400, help="envelopes per concurrency level and repeat")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each server")
    ap.add_argument("--spotlight", default="auto", help="auto (npm install once), none, or the spotlight executable")
    ap.add_argument("--otlp", action="store_true", help="OTLP/HTTP requests against envelopes on the same server")
    args = ap.parse_args()
    if args.otlp:
        return otlp_main(args)
    exe = spotlight_bin(args.spotlight)
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/x-sentry-envelope"}
    with tempfile.TemporaryDirectory() as d, serving(Path(d) / "store") as (port, key), \
            (spotlight(exe) if exe else contextlib.nullcontext()) as sport:
        store = Path(d) / "store"
        watch = Store(store).conn  # (one connection, polled while the writer turns the spool into runs)
        mine_headers = {**headers, "X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7"}
        warm = [make_envelope(uuid.uuid4().hex, 1_790_000_000.0 + k) for k in range(20)]
        post_all(port, "/api/1/envelope/", mine_headers, warm, 1)
        if sport:
            post_all(sport, "/stream", headers, warm, 1)
        print(f"{'clients':>8} {'envelopes':>10} {'stepscope env/s':>16} {'Spotlight env/s':>16} {'ratio':>6} "
              f"{'stored env/s':>13} {'ratio':>6} {'lost':>5}  (medians of {args.repeats} interleaved repeats)")
        for n in [int(x) for x in args.clients.split(",")]:
            mine, stored, theirs, lost, bad = [], [], [], 0, 0
            for r in range(args.repeats):
                bodies = [make_envelope(uuid.uuid4().hex, 1_795_000_000.0 + k) for k in range(args.envelopes)]
                before = counts(store)
                time.sleep(QUIET_S)
                t0 = time.perf_counter()
                dt, b = post_all(port, "/api/1/envelope/", mine_headers, bodies, n)
                bad += len(b)
                deadline = time.time() + 30  # acknowledged once in the writer's spool: wait for the runs
                while watch.execute("SELECT count(*) FROM runs").fetchall()[0][0] - before[0] < args.envelopes \
                        and time.time() < deadline:
                    time.sleep(0.005)
                stored.append(args.envelopes / (time.perf_counter() - t0))
                got = [a - c for a, c in zip(counts(store), before)]
                lost += max(0, args.envelopes - got[0]) + max(0, args.envelopes * SPANS - got[1]) \
                    + max(0, args.envelopes * SAMPLES - got[2])
                mine.append(args.envelopes / dt)
                if sport:
                    time.sleep(QUIET_S)
                    dt, b = post_all(sport, "/stream", headers, bodies, n)
                    theirs.append(args.envelopes / dt if not b else float("nan"))
            m, ms = statistics.median(mine), statistics.median(stored)
            t = statistics.median(theirs) if theirs else float("nan")
            print(f"{n:>8} {args.envelopes:>10} {m:>16.0f} {t:>16.0f} {m / t:>6.2f} {ms:>13.0f} {ms / t:>6.2f} {lost:>5}"
                  + (f"  non-200: {bad}" if bad else ""))
        print(f"(load average {os.getloadavg()[0]:.1f}; lost: runs, spans and samples missing from stepscope's store)")


if __name__ == "__main__":
    main()
