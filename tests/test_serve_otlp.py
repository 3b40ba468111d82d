"""`stepscope serve` taking OTLP/HTTP traces (POST /v1/traces) as users send them: a program instrumented with the
OpenTelemetry SDK (not stepscope) exporting with the SDK's own OTLP exporter (protobuf, gzip), the same spans by hand
as OTLP/JSON, keys, bad bodies, limits, resent requests, sentry-python's streamed spans, and two "hosts" of one job
whose clocks differ joined into one run; the CLI and the web UI on what was stored."""

import base64
import gzip
import json
import subprocess
import sys
import time

import pytest
from conftest import PROGRAMS, cli_env, run_cli, wait_until
from serve_helpers import Server

from stepscope.store.db import Store
from stepscope.store.reader import load_run

pytest.importorskip("opentelemetry.sdk")
from google.protobuf import json_format  # noqa: E402
from google.rpc.status_pb2 import Status  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest, ExportTraceServiceResponse)

PB = "application/x-protobuf"


def new_key(store) -> str:
    r = run_cli(["keys", "add", "--json"], store)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["public_key"]


def otel_program(store, out, *args, srv=None, key=None):
    """Run the OpenTelemetry SDK program (exporting to ``srv`` when given); its recorded spans."""
    cmd = [sys.executable, str(PROGRAMS / "otel_client.py"), str(out), *args]
    if srv is not None:
        cmd += ["--endpoint", f"{srv.url}/v1/traces", "--key", key]
    r = subprocess.run(cmd, env=cli_env(store), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "spans.json").read_text())


def auth(key, ctype=PB, **more):
    return {"X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7", "Content-Type": ctype, **more}


def runs(store) -> list:
    st = Store(store)
    try:
        return st.list_runs()
    finally:
        st.close()


def assert_same_trace(data, recorded):
    """Names, parents and durations (to the ns) of the stored run are those the program recorded."""
    rec = sorted(recorded, key=lambda s: s["start"])
    got = sorted(data.spans, key=lambda s: (s.start_ns, s.span_id))
    assert [s.name for s in got] == [s["name"] for s in rec]
    assert [s.end_ns - s.start_ns for s in got] == [s["end"] - s["start"] for s in rec]
    assert [data.run.to_wall_ns(s.start_ns) for s in got] == [s["start"] for s in rec]
    index = {s["span_id"]: k for k, s in enumerate(rec)}
    ids = [s.span_id for s in got]
    assert [None if s.parent_id is None else ids.index(s.parent_id) for s in got] == \
        [None if s["parent"] is None else index[s["parent"]] for s in rec]


@pytest.fixture(scope="module")
def otel_server(tmp_path_factory):
    """A server that the OpenTelemetry SDK program exported its trace to (protobuf)."""
    base = tmp_path_factory.mktemp("otlp")
    store = base / "store"
    key = new_key(store)
    srv = Server(store)
    srv.key = key
    srv.recorded = otel_program(store, base / "prog", srv=srv, key=key)
    srv.out = base / "prog"
    wait_until(lambda: len(runs(store)) == 1, 30, "the program's trace to be a run")
    srv.run_id = runs(store)[0].id
    yield srv
    srv.stop()


def test_an_otel_sdk_programs_trace_is_a_run_with_its_steps(otel_server):
    store = otel_server.store
    st = Store(store)
    data = load_run(st, otel_server.run_id)
    st.close()
    assert_same_trace(data, otel_server.recorded)
    assert data.run.command == ["otel-sd"]  # (the resource's service.name names the run)
    assert data.run.env["resource"]["service.name"] == "otel-sd" and data.run.host == "host-a"
    # diffusion.step from the spans' code.function.name (pipeline call, UNet forward, scheduler step)
    unet = [s for s in sorted(data.spans, key=lambda s: s.start_ns) if s.name == "UNet2DConditionModel.forward"]
    assert [s.attrs["diffusion.step"] for s in unet] == [0, 1, 2, 3]
    r = run_cli(["explain", "--json", otel_server.run_id], store)
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)["explanation"]
    assert e["unit"] == "step" and [x["group"] for x in e["repeats"]].count("slow") == 1
    assert next(x for x in e["repeats"] if x["group"] == "slow")["index"] == 2  # the program's slow step
    assert e["advice"].startswith("no samples in this run (spans only: sent as otlp)"), e["advice"]
    r = run_cli(["explain", otel_server.run_id], store)
    assert r.returncode == 0 and "step 2" in r.stdout, r.stdout + r.stderr


def test_resent_and_json_gzip_requests(otel_server):
    srv, key = otel_server, otel_server.key
    body = (srv.out / "request.pb").read_bytes()
    before = runs(srv.store)
    status, resp, headers = srv.post("/v1/traces", body, auth(key))  # the same request again: stored once
    assert status == 200 and headers["content-type"] == PB
    assert not ExportTraceServiceResponse.FromString(resp).HasField("partial_success")
    st = Store(srv.store)
    n = len(load_run(st, srv.run_id).spans)
    st.close()
    assert n == len(srv.recorded) and len(runs(srv.store)) == len(before)
    # the same spans as OTLP/JSON (hex ids), gzip, under a new trace id: a run of its own with the same spans
    doc = json_format.MessageToDict(ExportTraceServiceRequest.FromString(body))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for k in ("spanId", "parentSpanId"):
                    if k in sp:
                        sp[k] = base64.b64decode(sp[k]).hex()
                sp["traceId"] = "0123456789abcdef" * 2
    status, resp, headers = srv.post("/v1/traces", gzip.compress(json.dumps(doc).encode()),
                                     auth(key, "application/json", **{"Content-Encoding": "gzip"}))
    assert status == 200 and headers["content-type"] == "application/json" and json.loads(resp) == {}, resp
    wait_until(lambda: len(runs(srv.store)) == len(before) + 1, 30, "the JSON request's run")
    rid = next(r.id for r in runs(srv.store) if r.env.get("trace_id") == "0123456789abcdef" * 2)
    st = Store(srv.store)
    assert_same_trace(load_run(st, rid), srv.recorded)
    st.close()


def test_a_trace_in_two_requests_children_first(otel_server):
    """As a batch span processor exports: spans as they end, the root (the parent of the others) last."""
    srv = otel_server
    req = ExportTraceServiceRequest.FromString((srv.out / "request.pb").read_bytes())
    spans = req.resource_spans[0].scope_spans[0].spans
    for sp in spans:
        sp.trace_id = bytes.fromhex("cd" * 16)
    first, second = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    first.CopyFrom(req)
    second.CopyFrom(req)
    for r, keep in ((first, lambda sp: len(sp.parent_span_id)), (second, lambda sp: not len(sp.parent_span_id))):
        ss = r.resource_spans[0].scope_spans[0]
        kept = [sp for sp in ss.spans if keep(sp)]
        del ss.spans[:]
        ss.spans.extend(kept)
    for r in (first, second):
        assert srv.post("/v1/traces", r.SerializeToString(), auth(srv.key))[0] == 200
    st = Store(srv.store)
    rid = next(r.id for r in st.list_runs() if r.env.get("trace_id") == "cd" * 16)
    data = load_run(st, rid)
    st.close()
    assert_same_trace(data, srv.recorded)
    assert data.run.command == ["otel-sd"]  # (service.name, not the root that came last)


def test_keys_bad_bodies_limits_and_partial_success(otel_server):
    srv, key = otel_server, otel_server.key
    body = (srv.out / "request.pb").read_bytes()
    count = len(runs(srv.store))
    for headers in ({"Content-Type": PB}, auth("0" * 32)):  # no key, a key no project has: 401, as envelopes
        status, resp, _ = srv.post("/v1/traces", body, headers)
        assert status == 401 and "sentry_key" in Status.FromString(resp).message
    status, resp, _ = srv.post("/v1/traces", body, {"Content-Type": PB, "X-Sentry-Auth": ""})
    assert status == 401
    status, resp, _ = srv.post(f"/v1/traces?sentry_key={key}", body, {"Content-Type": PB})  # the key in the URL
    assert status == 200
    for ctype, garbage in ((PB, b"\xff\xfe not a protobuf message"), ("application/json", b'{"resourceSpans": 7}'),
                           ("application/json", b"{not json")):
        status, resp, headers = srv.post("/v1/traces", garbage, auth(key, ctype))
        assert status == 400 and headers["content-type"] == ctype
        msg = Status.FromString(resp).message if ctype == PB else json.loads(resp)["message"]
        assert msg.startswith("body is not") and "\n" not in msg
    status, resp, _ = srv.post("/v1/traces", b"\x1f\x8b broken", auth(key, **{"Content-Encoding": "gzip"}))
    assert status == 400 and "gzip" in Status.FromString(resp).message
    status, resp, headers = srv.post("/v1/traces", body, auth(key, "text/plain"))
    assert status == 415
    big = gzip.compress(b"\0" * (101 * 1024 * 1024))  # over --max-decoded-mb 100 once decompressed
    status, resp, _ = srv.post("/v1/traces", big, auth(key, **{"Content-Encoding": "gzip"}))
    assert status == 413 and "more than" in Status.FromString(resp).message
    status, resp, _ = srv.post("/v1/traces", b"\0" * (21 * 1024 * 1024), auth(key))  # over --max-body-mb 20
    assert status == 413
    # one span without a valid span id among good ones: the rest is kept, the one counted in partial_success
    req = ExportTraceServiceRequest.FromString(body)
    spans = req.resource_spans[0].scope_spans[0].spans
    for sp in spans:
        sp.trace_id = bytes.fromhex("fe" * 16)
    spans[0].span_id = b"\0" * 8
    status, resp, _ = srv.post("/v1/traces", req.SerializeToString(), auth(key))
    ps = ExportTraceServiceResponse.FromString(resp).partial_success
    assert status == 200 and ps.rejected_spans == 1 and "spanId" in ps.error_message
    wait_until(lambda: any(r.env.get("trace_id") == "fe" * 16 for r in runs(srv.store)), 30, "the partial request's run")
    assert len(runs(srv.store)) == count + 1  # nothing of the refused requests


def test_otel_exporter_with_gzip(tmp_path):
    store = tmp_path / "store"
    key = new_key(store)
    srv = Server(store)
    try:
        recorded = otel_program(store, tmp_path / "prog", "--gzip", "--host", "gz-host", srv=srv, key=key)
        wait_until(lambda: len(runs(store)) == 1, 30, "the run")
        assert srv.stats()["endpoint"]["encodings"] == {"gzip": 1}
        st = Store(store)
        assert_same_trace(load_run(st, runs(store)[0].id), recorded)
        st.close()
    finally:
        srv.stop()


SENTRY_STREAM = """
import sys, time
import sentry_sdk
from sentry_sdk import traces
sentry_sdk.init(dsn=sys.argv[1], traces_sample_rate=1.0, _experiments={"trace_lifecycle": "stream"})
with traces.start_span(name="txt2img"):
    for i in range(3):
        with traces.start_span(name="unet", attributes={"diffusion.step": i, "sentry.op": "function"}):
            time.sleep(0.005)
    try:
        with traces.start_span(name="decode"):
            raise ValueError("x")
    except ValueError:
        pass
sentry_sdk.flush()
print("sent")
"""


def test_sentry_sdk_span_streaming(tmp_path):
    store = tmp_path / "store"
    key = new_key(store)
    srv = Server(store)
    try:
        prog = tmp_path / "stream.py"
        prog.write_text(SENTRY_STREAM)
        r = subprocess.run([sys.executable, str(prog), f"http://{key}@127.0.0.1:{srv.port}/1"], env=cli_env(store),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "sent" in r.stdout, r.stderr[-3000:]
        wait_until(lambda: len(runs(store)) == 1, 30, "the streamed spans' run")
        st = Store(store)
        data = load_run(st, runs(store)[0].id)
        st.close()
        assert data.run.command == ["txt2img"] and data.run.env["source"] == "sentry"
        by_name = {}
        for s in data.spans:
            by_name.setdefault(s.name, []).append(s)
        root = by_name["txt2img"][0]
        assert root.parent_id is None
        assert [s.attrs["diffusion.step"] for s in sorted(by_name["unet"], key=lambda s: s.start_ns)] == [0, 1, 2]
        assert all(s.parent_id == root.span_id and s.op == "function" for s in by_name["unet"])
        assert all(s.end_ns - s.start_ns >= 5_000_000 for s in by_name["unet"])
        assert by_name["decode"][0].error_type == "error"
        assert {data.profile.thread_names.get(s.thread_id) for s in data.spans} == {"MainThread"}
        assert srv.stats()["items"]["span"] == {"received": 1, "stored": 1}
    finally:
        srv.stop()


SHIFT_NS = 250_000_000  # host-b's wall clock is 250 ms ahead of host-a's


def test_two_hosts_of_one_job_are_one_run_with_the_clock_offset_estimated(tmp_path):
    store = tmp_path / "store"
    key = new_key(store)
    srv = Server(store)
    base = (time.time_ns() // 10**9 - 60) * 10**9
    try:
        common = ["--job", "job-42", "--collectives", "10", "--base-ns", str(base)]
        otel_program(store, tmp_path / "a", *common, "--host", "host-a", "--rank", "0", srv=srv, key=key)
        otel_program(store, tmp_path / "b", *common, "--host", "host-b", "--rank", "1", "--shift-ns", str(SHIFT_NS),
                     srv=srv, key=key)
        otel_program(store, tmp_path / "c", "--job", "job-42", "--host", "host-c", "--steps", "2", srv=srv, key=key)
        wait_until(lambda: len(runs(store)) == 1 and len(Store(store).process_runs(runs(store)[0].id)) == 3, 30,
                   "one run of three processes")
        st = Store(store)
        data = load_run(st, runs(store)[0].id)
        st.close()
        facts = {r.host: r.process for r in data.processes}
        assert set(facts) == {"host-a", "host-b", "host-c"}
        assert facts["host-b"]["rank"] == 1 and facts["host-a"]["clock_offset_ns"] == 0
        # the collectives' ends are given exactly (the SDK keeps the ns it is handed): the estimate is exact, and a
        # tolerance of 1 us only covers the integer median
        assert abs(facts["host-b"]["clock_offset_ns"] - SHIFT_NS) < 1_000
        assert facts["host-b"]["clock_basis"] == "median of 10 shared collective ends against host-a"
        assert facts["host-c"]["clock_basis"] == "not estimated (no shared collectives)"
        # joined on host-a's clock: the k-th all_reduce of both ranks ends at one instant
        ar = [s for s in data.spans if s.op == "collective"]
        ends = {}
        for s in ar:
            ends.setdefault(s.end_ns, 0)
            ends[s.end_ns] += 1
        assert len(ar) == 20 and set(ends.values()) == {2}
        r = run_cli(["explain", runs(store)[0].id], store)
        assert "host-b: +250.0 ms (median of 10 shared collective ends against host-a)" in r.stdout, r.stdout + r.stderr
        assert "host-c: +0 ns (not estimated (no shared collectives))" in r.stdout
        r = run_cli(["explain", "--json", runs(store)[0].id], store)
        assert json.loads(r.stdout)["clocks"]["host-b"]["offset_ns"] == facts["host-b"]["clock_offset_ns"]
    finally:
        srv.stop()


def test_the_run_page_shows_the_otel_trace(browser_page, otel_server):
    page = browser_page
    page.goto(f"{otel_server.url}/runs/{otel_server.run_id}")
    page.wait_for_function("window.stepscopeReport !== undefined")
    i = page.evaluate("stepscopeReport.findSpan('UNet2DConditionModel.forward', 2)")
    assert i is not None and i >= 0
    assert page.locator("#steps tr.clickable").count() == 4
    assert not page.errors
