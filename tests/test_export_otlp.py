"""`stepscope export --format otlp` and `stepscope run --export otlp`: a real run of tests/programs/otlp_job.py (two
processes) exported to an OTLP/JSON file and over OTLP/HTTP to a receiver in the test, both decoded with
OpenTelemetry's own protos and checked against the store and the Chrome export."""

import base64
import gzip
import hashlib
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import cli_env, run_cli
from jobrun import JOB, TRACE, record_job

from stepscope.store.db import Store
from stepscope.store.reader import load_parts

pytest.importorskip("opentelemetry.proto")
from google.protobuf import json_format  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest, ExportTraceServiceResponse)



@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The stored two-process run of otlp_job.py: (store, top run id)."""
    store = tmp_path_factory.mktemp("otlp") / "store"
    return store, record_job(store)


def decode_json(doc: dict) -> ExportTraceServiceRequest:
    """An OTLP/JSON document decoded with the official protos: the hex ids turned into the protobuf JSON mapping's
    base64 first (OTLP/JSON's one difference for bytes fields), then json_format.Parse."""
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if s.get(k):
                        s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
    return json_format.Parse(json.dumps(doc), ExportTraceServiceRequest())


def attrs(kvs) -> dict:
    out = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


def spans_of(req: ExportTraceServiceRequest) -> dict:
    """process run id -> {span id hex: (name, parent id hex, start ns, end ns, span)}."""
    out: dict = {}
    for rs in req.resource_spans:
        prun = attrs(rs.resource.attributes)["stepscope.process.run.id"]
        d = out.setdefault(prun, {})
        for ss in rs.scope_spans:
            assert ss.scope.name == "stepscope"
            for s in ss.spans:
                d[s.span_id.hex()] = (s.name, s.parent_span_id.hex() or None, s.start_time_unix_nano,
                                      s.end_time_unix_nano, s)
    return out


def contract_span_id(prun: str, sid: int) -> str:
    """docs/backends.md's span id, computed here independently of the exporter."""
    return hashlib.sha256(f"stepscope-span:{prun}:{sid}".encode()).digest()[:8].hex()


def export_file(store, path, *more) -> ExportTraceServiceRequest:
    r = run_cli(["export", "--format", "otlp", "-o", str(path), *more], store)
    assert r.returncode == 0, r.stderr
    return decode_json(json.loads(path.read_text()))


def test_file_export_has_the_stored_spans_to_the_ns(job, tmp_path):
    store, rid = job
    req = export_file(store, tmp_path / "run.otlp.json")
    got = spans_of(req)
    st = Store(store)
    parts = list(load_parts(st, rid))
    assert set(got) == {p.run.id for p in parts}, "one resource per process run"
    trace = hashlib.sha256(f"stepscope-trace:{rid}".encode()).digest()[:16]
    for p in parts:
        shift = p.run.anchor_wall_ns - p.run.anchor_mono_ns
        mine = got[p.run.id]
        assert len(mine) == len(p.spans) > 0
        for s in p.spans:
            name, parent, t0, t1, span = mine[contract_span_id(p.run.id, s.span_id)]
            assert span.trace_id == trace
            assert name == s.name
            assert parent == (None if s.parent_id is None else contract_span_id(p.run.id, s.parent_id))
            assert (t0, t1) == (s.start_ns + shift, s.end_ns + shift)  # wall ns, to the ns
    st.close()


def test_file_export_matches_the_chrome_export(job, tmp_path):
    """Every span of `export --format chrome` (us from the run's start, process k's ids moved up by k << 40) is in the
    OTLP export with the same name, parent and duration (to the ns: Chrome's us are ns / 1000)."""
    store, rid = job
    req = export_file(store, tmp_path / "run.otlp.json")
    got = spans_of(req)
    r = run_cli(["export", "--format", "chrome", "-o", str(tmp_path / "run.trace.json")], store)
    assert r.returncode == 0, r.stderr
    events = [e for e in json.loads((tmp_path / "run.trace.json").read_text())["traceEvents"] if e["ph"] == "X"]
    st = Store(store)
    order = [rid] + [p.id for p in st.process_runs(rid)]
    st.close()
    assert len(events) == sum(len(v) for v in got.values())
    for e in events:
        k, sid = divmod(e["args"]["span_id"], 1 << 40)
        prun = order[k]
        name, parent, t0, t1, _ = got[prun][contract_span_id(prun, sid)]
        assert name == e["args"]["name"]
        assert round(e["dur"] * 1000) == t1 - t0
        par = e["args"].get("parent_id")
        assert parent == (None if par is None else contract_span_id(prun, par - (k << 40)))


def test_ids_attributes_and_errors(job, tmp_path):
    store, rid = job
    a = export_file(store, tmp_path / "a.json")
    b = export_file(store, tmp_path / "b.json", rid)
    ids = lambda req: sorted((s.trace_id, s.span_id, s.parent_span_id) for rs in req.resource_spans  # noqa: E731
                             for ss in rs.scope_spans for s in ss.spans)
    assert ids(a) == ids(b), "the same run exported twice gives the same ids"
    top, child = a.resource_spans
    ra, rc = attrs(top.resource.attributes), attrs(child.resource.attributes)
    assert ra["service.name"] == rc["service.name"] == "otlp_job.py"
    assert ra["stepscope.run.id"] == rc["stepscope.run.id"] == rid
    assert rc["process.parent_pid"] == ra["process.pid"] and ra["host.name"]
    assert ra["process.runtime.name"] == "cpython" and JOB in ra["process.command_line"]
    spans = [s for rs in a.resource_spans for ss in rs.scope_spans for s in ss.spans]
    leaf = next(s for s in spans if s.name == "__main__.leaf")
    la = attrs(leaf.attributes)
    assert la["code.function.name"] == "__main__.leaf" and la["stepscope.op"] == "function"
    assert la["code.file.path"] == str(JOB) and la["code.line.number"] == 15  # `def leaf` (the traced function)
    assert la["thread.name"] == "MainThread" and la["thread.id"] > 0
    assert leaf.status.code == 0 and leaf.kind == 1  # UNSET, INTERNAL
    booms = [s for s in spans if s.name == "__main__.boom"]
    assert len(booms) == 2  # one a process
    for s in booms:
        assert s.status.code == 2 and s.status.message == "ValueError"  # STATUS_CODE_ERROR
        assert [(e.name, attrs(e.attributes)) for e in s.events] == [("exception", {"exception.type": "ValueError"})]
    named = run_cli(["export", "--format", "otlp", "--service", "sd-worker", "-o", "-"], store)
    assert named.returncode == 0, named.stderr
    req = decode_json(json.loads(named.stdout))
    assert {attrs(rs.resource.attributes)["service.name"] for rs in req.resource_spans} == {"sd-worker"}


def test_batches_are_bounded_and_hold_every_span(job):
    """A process run is sent a batch of spans at a time (bounded memory): every message has at most `batch` spans
    of one resource, and together they are the file export's spans."""
    from stepscope.output.export.otlp_encode import requests

    store, rid = job
    st = Store(store)
    msgs = list(requests(load_parts(st, rid), rid, batch=4))
    st.close()
    assert len(msgs) > 2
    total = 0
    for m in msgs:
        assert len(m.resource_spans) == 1
        n = sum(len(ss.spans) for ss in m.resource_spans[0].scope_spans)
        assert 0 < n <= 4
        total += n
    st = Store(store)
    assert total == sum(len(p.spans) for p in load_parts(st, rid))
    st.close()


class Receiver:
    """An OTLP/HTTP receiver in a thread: POST /v1/traces, protobuf bodies (gzip too) decoded with the official
    protos; answers `status` (400: with a google.rpc.Status body)."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[tuple[str, dict, ExportTraceServiceRequest]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if status != 200:
                    from google.rpc.status_pb2 import Status

                    out = Status(code=3, message="span batch refused: missing tenant").SerializeToString()
                else:
                    outer.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()},
                                           ExportTraceServiceRequest.FromString(body)))
                    out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> dict:
        out: dict = {}
        for _, _, req in self.requests:
            for k, v in spans_of(req).items():
                out.setdefault(k, {}).update(v)
        return {k: {i: s[:4] for i, s in v.items()} for k, v in out.items()}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_http_export_sends_the_files_spans_with_the_environments_headers(job, receiver, tmp_path):
    store, rid = job
    want = {k: {i: s[:4] for i, s in v.items()} for k, v in spans_of(export_file(store, tmp_path / "f.json")).items()}
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "x-team=diffusion,authorization=Bearer%20t0k",
           "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
    r = subprocess.run([sys.executable, "-m", "stepscope", "export", "--format", "otlp", "--endpoint", receiver.url],
                       env={**cli_env(store), **env}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "sent to" in r.stderr and not (tmp_path / f"stepscope-{rid}.otlp.json").exists()
    assert receiver.spans() == want
    for path, headers, _ in receiver.requests:
        assert path == "/v1/traces"
        assert headers["x-team"] == "diffusion" and headers["authorization"] == "Bearer t0k"
        assert headers["content-encoding"] == "gzip" and headers["content-type"] == "application/x-protobuf"


def test_http_export_to_the_environments_endpoint(job, receiver, tmp_path):
    store, rid = job
    r = subprocess.run([sys.executable, "-m", "stepscope", "export", "--format", "otlp"], cwd=tmp_path,
                       env={**cli_env(store), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url + "/"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.glob("*.otlp.json")), "sent, not written"
    st = Store(store)
    assert sum(len(v) for v in receiver.spans().values()) == sum(len(p.spans) for p in load_parts(st, rid))
    st.close()


def test_a_refusing_or_absent_collector_is_one_line(job):
    store, _ = job
    bad = Receiver(400)
    try:
        r = run_cli(["export", "--format", "otlp", "--endpoint", bad.url], store)
    finally:
        bad.close()
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "HTTP 400" in r.stderr and "missing tenant" in r.stderr, r.stderr
    gone = subprocess.run([sys.executable, "-m", "stepscope", "export", "--format", "otlp", "--endpoint", bad.url],
                          env={**cli_env(store), "OTEL_EXPORTER_OTLP_TIMEOUT": "2"}, capture_output=True, text=True,
                          timeout=120)
    assert gone.returncode == 1
    assert gone.stderr.count("\n") == 1 and "could not reach" in gone.stderr and "Connection refused" in gone.stderr


def test_run_export_sends_each_run_and_leaves_the_program_alone(receiver, tmp_path):
    store = tmp_path / "store"
    plain = subprocess.run([sys.executable, JOB, "exit", "3"], capture_output=True, text=True, timeout=120)
    r = run_cli(["run", "-q", *TRACE, "--export", f"otlp={receiver.url}", "--", sys.executable, JOB, "exit", "3"], store)
    assert (r.returncode, r.stdout) == (plain.returncode, plain.stdout) == (3, "job done\n")
    assert r.stderr == plain.stderr, "with -q, nothing of stepscope's on stderr when the send went through"
    st = Store(store)
    rid = st.resolve_id(None)
    got = receiver.spans()
    assert list(got) == [rid]
    assert sorted(s[0] for s in got[rid].values()) == sorted(s.name for s in next(load_parts(st, rid)).spans)
    st.close()
    failed = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", *TRACE, "--export", "otlp=http://127.0.0.1:9",
                             "--", sys.executable, JOB], env={**cli_env(store), "OTEL_EXPORTER_OTLP_TIMEOUT": "2"},
                            capture_output=True, text=True, timeout=120)
    assert (failed.returncode, failed.stdout) == (0, "job done\n")
    assert failed.stderr.startswith("job stderr\n") and failed.stderr.count("\n") == 2
    assert "--export otlp" in failed.stderr and "could not reach" in failed.stderr
    st = Store(store)
    assert len(st.list_runs()) == 2, "the run whose export failed stays stored"
    st.close()
