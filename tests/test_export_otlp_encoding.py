"""The OTLP export's encoding, on real runs: tests/programs/otlp_job.py (two processes, an exception) and
tests/programs/otlp_many.py (20,021 spans on two threads, spans with attributes of every kind, errors).

The protobuf requests (`export.otlp_encode.requests`, built from the span columns) are checked against the messages
OpenTelemetry's SDK encoder makes of the same spans (`sdk_requests` below: SDK ReadableSpans + `encode_spans`, the
way the export was first built); the OTLP/JSON file (`export --format otlp -o`, written from the columns) is parsed
with the official protos into the same messages; `--endpoint` delivers them through the SDK exporter's client."""

import json
import re
import subprocess
import sys

import pytest
from conftest import PROGRAMS, cli_env, run_cli
from jobrun import record_job
from test_export_otlp import Receiver, decode_json

from stepscope.output.export.otlp_encode import (BATCH, SCOPE_NAME, requests, resource_attributes, span_attributes, span_id, trace_id)
from stepscope.core.spantable import as_table
from stepscope.store.db import Store
from stepscope.store.reader import load_parts

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

MANY = str(PROGRAMS / "otlp_many.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (store, top run id): the two-process job and the 20k-span run of otlp_many.py."""
    job = tmp_path_factory.mktemp("otlp-job") / "store"
    many = tmp_path_factory.mktemp("otlp-many") / "store"
    r = run_cli(["run", "-q", "-t", "__main__.f", "--", sys.executable, MANY], many)
    assert r.returncode == 0 and r.stdout == "many done\n", r.stderr
    st = Store(many)
    rid = st.resolve_id(None)
    st.close()
    return {"job": (job, record_job(job)), "many": (many, rid)}


def sdk_requests(parts, top_id: str, service=None, batch: int = BATCH):
    """The reference: each batch of spans as OpenTelemetry SDK ReadableSpans (docs/backends.md's mapping, written
    here from the Span objects), encoded by the SDK's `encode_spans`."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    from stepscope import __version__

    tid = int.from_bytes(trace_id(top_id), "big")
    flags = TraceFlags(TraceFlags.SAMPLED)
    for part in parts:
        run = part.run
        resource = Resource(resource_attributes(run, top_id, service))
        scope = InstrumentationScope(SCOPE_NAME, __version__)
        shift = run.anchor_wall_ns - run.anchor_mono_ns
        code = (run.env or {}).get("code") or {}
        names = part.profile.thread_names
        ctx = lambda s: SpanContext(tid, int.from_bytes(span_id(run.id, s), "big"), is_remote=False,  # noqa: E731
                                    trace_flags=flags)
        spans = list(as_table(part.spans))
        for lo in range(0, len(spans), batch):
            out = []
            for s in spans[lo:lo + batch]:
                a = {}
                if s.op in ("function", "collective"):
                    a["code.function.name"] = s.name
                    if s.name in code:
                        a["code.file.path"], a["code.line.number"] = str(code[s.name][0]), int(code[s.name][1])
                a["thread.id"] = s.thread_id
                if s.thread_id in names:
                    a["thread.name"] = names[s.thread_id]
                a["stepscope.op"] = s.op
                a.update(span_attributes(s.attrs))
                status, events = Status(StatusCode.UNSET), ()
                if s.status == "error":
                    status = Status(StatusCode.ERROR, s.error_type)
                    events = (Event("exception", {"exception.type": s.error_type}, timestamp=s.end_ns + shift),)
                out.append(ReadableSpan(s.name, ctx(s.span_id), None if s.parent_id is None else ctx(s.parent_id),
                                        resource, a, events, (), SpanKind.INTERNAL, None, status, s.start_ns + shift,
                                        s.end_ns + shift, scope))
            yield encode_spans(out)


def wire(message) -> bytes:
    """A message's bytes (deterministic): the comparison of two messages that also holds for a NaN attribute (a
    message holding a NaN is not == to itself under protobuf 4)."""
    return message.SerializeToString(deterministic=True)


def messages(store, rid, fn, **kw) -> list:
    st = Store(store)
    try:
        return list(fn(load_parts(st, rid), rid, **kw))
    finally:
        st.close()


@pytest.mark.parametrize("name", ["job", "many"])
@pytest.mark.parametrize("batch", [BATCH, 333])
def test_requests_are_the_sdk_encoders_messages(runs, name, batch):
    store, rid = runs[name]
    new = messages(store, rid, requests, service="sd-worker", batch=batch)
    old = messages(store, rid, sdk_requests, service="sd-worker", batch=batch)
    assert [len(m.resource_spans[0].scope_spans[0].spans) for m in new] == \
        [len(m.resource_spans[0].scope_spans[0].spans) for m in old]
    assert sum(len(m.resource_spans[0].scope_spans[0].spans) for m in new) > (20_000 if name == "many" else 10)
    assert [wire(m) for m in new] == [wire(m) for m in old]


def merged(msgs) -> ExportTraceServiceRequest:
    """The requests of a run as one request: one resourceSpans per process run, its spans in order."""
    out = ExportTraceServiceRequest()
    for m in msgs:
        rs = m.resource_spans[0]
        if not out.resource_spans or out.resource_spans[-1].resource != rs.resource:
            out.resource_spans.add().CopyFrom(rs)
        else:
            out.resource_spans[-1].scope_spans[0].spans.extend(rs.scope_spans[0].spans)
    return out


@pytest.mark.parametrize("name", ["job", "many"])
def test_json_file_parses_into_the_protobuf_messages(runs, name, tmp_path):
    store, rid = runs[name]
    path = tmp_path / "run.otlp.json"
    r = run_cli(["export", "--format", "otlp", "-o", str(path), rid], store)
    assert r.returncode == 0, r.stderr
    text = path.read_text()
    doc = json.loads(text)
    assert len(doc["resourceSpans"]) == (2 if name == "job" else 1), "one resourceSpans per process run"
    assert wire(decode_json(doc)) == wire(merged(messages(store, rid, sdk_requests)))
    assert not re.search(rb'"(intValue|startTimeUnixNano|endTimeUnixNano|timeUnixNano)":[^"]', path.read_bytes()), \
        "64-bit integers as strings (OTLP/JSON)"
    span = json.loads(text)["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    assert isinstance(span["startTimeUnixNano"], str) and int(span["startTimeUnixNano"]) > 1.6e18
    assert span["kind"] == 1 and span["flags"] == 256 and len(span["spanId"]) == 16 and len(span["traceId"]) == 32
    if name == "many":
        chunks = [s for s in json.loads(text)["resourceSpans"][0]["scopeSpans"][0]["spans"] if s["name"] == "chunk"]
        attrs = [{a["key"]: a["value"] for a in s["attributes"]} for s in chunks]
        first = next(a for a in attrs if a["diffusion.step"] == {"intValue": "0"})
        assert first["stepscope.loss"] == {"doubleValue": "NaN"} and first["stepscope.cfg"] == {"stringValue": '{"k":0}'}
        assert first["stepscope.shape"] == {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"},
                                                                      {"intValue": "0"}]}}
        assert first["stepscope.big"] == {"stringValue": str(2**70)} and first["stepscope.ok"] == {"boolValue": True}
        errors = [s for s in chunks if s.get("events")]
        assert len(errors) == 3 and all(s["status"] == {"message": "KeyError", "code": 2} for s in errors)
        assert all(s["events"][0]["timeUnixNano"] == s["endTimeUnixNano"] for s in errors)


def test_endpoint_delivers_the_requests(runs):
    """`export --endpoint`, gzip and a header from the environment: the receiver gets the requests as built (the SDK exporter's client
    compresses and sends the serialized bytes)."""
    store, rid = runs["many"]
    receiver = Receiver()
    try:
        r = subprocess.run([sys.executable, "-m", "stepscope", "export", "--format", "otlp", "--endpoint", receiver.url],
                           env={**cli_env(store), "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
                                "OTEL_EXPORTER_OTLP_HEADERS": "x-run=" + rid}, capture_output=True, text=True,
                           timeout=120)
    finally:
        receiver.close()
    assert r.returncode == 0, r.stderr
    want = messages(store, rid, requests)
    assert f"{sum(len(m.resource_spans[0].scope_spans[0].spans) for m in want)} spans" in r.stderr
    assert [wire(m) for _, _, m in receiver.requests] == [wire(m) for m in want]
    assert {h["x-run"] for _, h, _ in receiver.requests} == {rid}
