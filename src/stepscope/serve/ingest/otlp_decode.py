"""OTLP/HTTP trace requests (``POST /v1/traces``) turned into stepscope's trace records, and the answers OTLP/HTTP
specifies.

Formats: the OpenTelemetry protocol's ``ExportTraceServiceRequest`` (opentelemetry-proto,
``opentelemetry/proto/collector/trace/v1/trace_service.proto``) as binary protobuf (``application/x-protobuf``) or
as OTLP/JSON (``application/json``: the protobuf JSON mapping with lowerCamelCase keys, except that ``traceId`` and
``spanId`` are hex strings, https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding). Answers: an
``ExportTraceServiceResponse`` (``partial_success`` when spans were rejected) or a ``google.rpc.Status`` for an
error, in the request's encoding. The protobuf packages are imported on use.

What is kept (docs/backends.md, the OTLP mapping that ``stepscope export --format otlp`` writes): one
``TraceRecord`` per (trace id, resource); a span's ``stepscope.op`` attribute, else its kind, gives its op;
``thread.id``/``thread.name`` its thread; keys prefixed ``stepscope.`` lose the prefix, the others (``diffusion.step``,
``code.*``, a program's own) are kept as they come; status ERROR is an error named by the span's ``exception`` event's
``exception.type``, else by the status message; its message (the event's ``exception.message``, else the status
message) is kept as the span's ``exception.message`` attribute. A span without a valid trace id, span id or start is rejected (counted
in ``partial_success``), the rest of the request is kept.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import orjson

from ...core.jsondepth import KEPT_DEPTH, TOO_DEEP

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: a span's op from its kind when it has no ``stepscope.op`` (SpanKind, trace.proto)
KIND_OPS = {0: "function", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STEPSCOPE_PREFIX = "stepscope."
_MAX_NS = 2**62  # ns since the epoch (up to year 2116), as ``ingest.sentry``


class BadOtlp(Exception):
    """A request body that is not a valid ``ExportTraceServiceRequest`` (HTTP 400); the message names the field."""


@dataclass(slots=True)
class TraceRecord:
    """The spans of one trace from one resource (one run). ``trace_id``: 32 hex digits; ``resource``: the resource's
    attributes as they came; ``resource_key``: a digest of them (which resource, across requests); ``source``:
    "otlp" or "sentry" (span streaming). ``spans``: ``(span id, parent id | None, name, op, start_ns, end_ns, thread
    id, error type | None, attrs | None, thread name | None)`` with ids as int64 (the 8 id bytes, big-endian, signed)
    and times as wall ns since the epoch."""

    source: str
    trace_id: str
    resource: dict
    resource_key: str
    spans: list


def resource_key(resource: dict) -> str:
    """A stable digest (16 hex digits) of a resource's attributes."""
    return hashlib.blake2b(orjson.dumps(resource, default=str, option=orjson.OPT_SORT_KEYS), digest_size=8).hexdigest()


def span_id(b: bytes) -> int:
    """An 8-byte span id as an int64 (big-endian, signed)."""
    return int.from_bytes(b, "big", signed=True)


def split_attrs(attrs: dict, op: str) -> tuple[str, int, str | None, dict | None]:
    """``(op, thread id, thread name, attrs)`` of a span's attributes (see the module): ``stepscope.op`` and the
    thread's keys taken out, ``stepscope.`` prefixes dropped. ``op``: the op when ``stepscope.op`` is absent."""
    out: dict = {}
    tid, tname = 0, None
    for k, v in attrs.items():
        if k.startswith(STEPSCOPE_PREFIX):
            if k == "stepscope.op":
                op = str(v)[:200]
            else:
                out[k[len(STEPSCOPE_PREFIX):]] = v
        elif k == "thread.id" and type(v) is int and 0 <= v < 2**63:
            tid = v
        elif k == "thread.name" and v is not None:
            tname = str(v)[:200]
        else:
            out[k] = v
    return op, tid, tname, out or None


def _value(v, depth: int, what: str):
    """An ``AnyValue`` as a Python value (bytes as hex text). Raises BadOtlp past ``KEPT_DEPTH`` levels."""
    k = v.WhichOneof("value")
    if k is None:
        return None
    if k == "array_value" or k == "kvlist_value":
        if depth >= KEPT_DEPTH:
            raise BadOtlp(f"{what}: nested more than {KEPT_DEPTH} levels deep")
        if k == "array_value":
            return [_value(x, depth + 1, what) for x in v.array_value.values]
        return {kv.key: _value(kv.value, depth + 1, what) for kv in v.kvlist_value.values}
    if k == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, k)


def _attrs(kvs, what: str) -> dict:
    return {kv.key: _value(kv.value, 1, what) for kv in kvs}


def _fix_ids(doc, what: str) -> None:
    """OTLP/JSON's hex ``traceId``/``spanId``/``parentSpanId`` (spans and links) as the base64 that the protobuf JSON
    mapping reads. Raises BadOtlp naming the field."""
    if not isinstance(doc, dict):
        raise BadOtlp(f"{what}: not a JSON object")

    def fix(obj: dict, where: str) -> None:
        for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"):
            v = obj.get(key)
            if v is None or v == "":
                continue
            try:
                obj[key] = base64.b64encode(bytes.fromhex(v)).decode()
            except (TypeError, ValueError):
                raise BadOtlp(f"{where}.{key}: not a hex id") from None

    def lst(obj: dict, *keys) -> list:
        for k in keys:
            v = obj.get(k)
            if v is not None:
                return v if isinstance(v, list) else []
        return []

    for i, rs in enumerate(lst(doc, "resourceSpans", "resource_spans")):
        if not isinstance(rs, dict):
            continue
        for j, ss in enumerate(lst(rs, "scopeSpans", "scope_spans")):
            if not isinstance(ss, dict):
                continue
            for k, sp in enumerate(lst(ss, "spans")):
                if not isinstance(sp, dict):
                    continue
                where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                fix(sp, where)
                for m, link in enumerate(lst(sp, "links")):
                    if isinstance(link, dict):
                        fix(link, f"{where}.links[{m}]")


def parse_request(body: bytes, content_type: str):
    """The ``ExportTraceServiceRequest`` of a body of ``content_type`` (``PROTOBUF`` or ``JSON``). Raises BadOtlp."""
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    if content_type == JSON:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise BadOtlp(f"body is not JSON: {e}") from None
        _fix_ids(doc, "body")
        try:
            json_format.ParseDict(doc, req, ignore_unknown_fields=True)
        except json_format.ParseError as e:
            raise BadOtlp(f"body is not an OTLP/JSON ExportTraceServiceRequest: {str(e).splitlines()[0][:300]}") from None
        except RecursionError:
            raise BadOtlp(f"body {TOO_DEEP}") from None
        return req
    try:
        req.ParseFromString(body)
    except (DecodeError, RecursionError) as e:
        raise BadOtlp(f"body is not a protobuf ExportTraceServiceRequest: {e}") from None
    if body and not len(req.resource_spans):
        # (an empty request encodes to no bytes: bytes that decode to nothing known are not OTLP)
        raise BadOtlp(f"body is not a protobuf ExportTraceServiceRequest (no resourceSpans in {len(body)} bytes)")
    return req


#: how much of an exception's message is kept (``exception.message``)
MESSAGE_CHARS = 1000


def error_of(sp, where: str) -> tuple[str, str | None]:
    """``(error type, message | None)`` of a span with status ERROR: the type from its ``exception`` event's
    ``exception.type``, else its status message, else "error"; the message from the event's ``exception.message``,
    else the status message (when that is not what names the type)."""
    etype = message = None
    for ev in sp.events:
        if ev.name == "exception":
            for a in ev.attributes:
                if a.key == "exception.type" and etype is None:
                    etype = str(_value(a.value, 1, where))[:200] or None
                elif a.key == "exception.message" and message is None:
                    message = str(_value(a.value, 1, where))[:MESSAGE_CHARS] or None
            break
    status = sp.status.message
    if etype is None:  # (the status message names it)
        return status[:200] or "error", message
    if message is None and status:  # ("ValueError: bad input", as the Python SDK words it: the message)
        message = status[len(etype) + 2:] if status.startswith(f"{etype}: ") else status
    return etype, message[:MESSAGE_CHARS] if message else None


def records(req) -> tuple[list[TraceRecord], int, str]:
    """``(records, rejected spans, first rejection's reason)`` of a parsed request. Raises BadOtlp (an attribute
    nested too deeply)."""
    out: dict[tuple[str, str], TraceRecord] = {}
    rejected, reason = 0, ""
    for i, rs in enumerate(req.resource_spans):
        resource = _attrs(rs.resource.attributes, f"resourceSpans[{i}].resource.attributes")
        rkey = resource_key(resource)
        for j, ss in enumerate(rs.scope_spans):
            for k, sp in enumerate(ss.spans):
                where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                bad = ("traceId is not 16 bytes" if len(sp.trace_id) != 16 or not any(sp.trace_id) else
                       "spanId is not 8 bytes" if len(sp.span_id) != 8 or not any(sp.span_id) else
                       "parentSpanId is not 8 bytes" if len(sp.parent_span_id) not in (0, 8) else
                       "startTimeUnixNano out of range" if not 0 < sp.start_time_unix_nano < _MAX_NS else
                       "endTimeUnixNano out of range" if sp.end_time_unix_nano >= _MAX_NS else "")
                if bad:
                    rejected += 1
                    reason = reason or f"{where}: {bad}"
                    continue
                op, tid, tname, attrs = split_attrs(_attrs(sp.attributes, f"{where}.attributes"),
                                                    KIND_OPS.get(sp.kind, "function"))
                err = None
                if sp.status.code == 2:
                    err, message = error_of(sp, where)
                    if message and "exception.message" not in (attrs or {}):
                        attrs = {**(attrs or {}), "exception.message": message}
                parent = span_id(sp.parent_span_id) if any(sp.parent_span_id) else None
                start = sp.start_time_unix_nano
                tkey = sp.trace_id.hex()
                rec = out.get((tkey, rkey))
                if rec is None:
                    rec = out[(tkey, rkey)] = TraceRecord("otlp", tkey, resource, rkey, [])
                rec.spans.append((span_id(sp.span_id), parent, sp.name[:1000] or "span", op, start,
                                  max(start, sp.end_time_unix_nano), tid, err, attrs, tname))
    return list(out.values()), rejected, reason


def response(rejected: int, message: str, content_type: str) -> bytes:
    """An ``ExportTraceServiceResponse`` body (``partial_success`` when ``rejected`` > 0) in ``content_type``."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    r = ExportTraceServiceResponse()
    if rejected:
        r.partial_success.rejected_spans = rejected
        r.partial_success.error_message = message
    if content_type == JSON:
        return json_format.MessageToJson(r, indent=None).encode()
    return r.SerializeToString()


#: google.rpc.Code values for the HTTP statuses OTLP/HTTP answers with
RPC_CODES = {400: 3, 401: 16, 403: 7, 413: 8, 415: 3, 503: 14}


def status(http_status: int, message: str, content_type: str) -> bytes:
    """A ``google.rpc.Status`` body (code from ``RPC_CODES``, ``message``) in ``content_type``."""
    from google.protobuf import json_format
    from google.rpc.status_pb2 import Status

    s = Status(code=RPC_CODES.get(http_status, 2), message=message)
    if content_type == JSON:
        return json_format.MessageToJson(s, indent=None).encode()
    return s.SerializeToString()
