"""A run as an OTLP/JSON file: the content of ``export.otlp_encode.requests`` written straight from the span columns.

OTLP/JSON is the protobuf JSON mapping of ``ExportTraceServiceRequest`` with the OTLP rules
(https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding): lowerCamelCase field names, trace and span
ids as lowercase hex, enums as integers, 64-bit integers (``startTimeUnixNano``, ``endTimeUnixNano``,
``timeUnixNano``, ``intValue``) as decimal strings, non-finite doubles as ``"NaN"``/``"Infinity"``/
``"-Infinity"``, fields at their default value left out (``"status": {}`` for an UNSET status is kept, as the
message has one). ``write_otlp_json`` builds each span's dict from ``export.otlp_encode.span_batches`` (the attributes of a
span group made once and shared) and writes a batch at a time with orjson: memory bounded by the batch, not the
run. Parsed back with ``google.protobuf.json_format`` (ids turned to base64), it is the protobuf path's messages,
one ``resourceSpans`` entry per process run (tests/test_export_otlp.py).
"""

from __future__ import annotations

import math
from typing import Any, BinaryIO, Iterable

import orjson

from ... import __version__
from ...core.model import RunData
from .otlp_encode import BATCH, SCOPE_NAME, resource_attributes, span_batches, trace_id

#: ``Span.SpanKind.SPAN_KIND_INTERNAL``, ``Status.StatusCode.STATUS_CODE_ERROR``, ``SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK``
KIND_INTERNAL, STATUS_ERROR, FLAGS = 1, 2, 256


def json_value(v: Any) -> dict:
    """An ``export.otlp_encode.attribute_value`` result (str, bool, int, float, or a list of one of those) as an OTLP/JSON
    ``AnyValue``: ``{"stringValue": ...}``, ``{"boolValue": ...}``, ``{"intValue": "decimal"}``,
    ``{"doubleValue": number or "NaN"/"Infinity"/"-Infinity"}``, ``{"arrayValue": {"values": [...]}}``."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v if math.isfinite(v) else ("NaN" if v != v else "Infinity" if v > 0 else "-Infinity")}
    return {"arrayValue": {"values": [json_value(x) for x in v]}}


def json_attributes(attrs: dict[str, Any]) -> list[dict]:
    """``attrs`` as OTLP/JSON ``KeyValue``s (``[{"key": ..., "value": AnyValue}]``), in order."""
    return [{"key": k, "value": json_value(v)} for k, v in attrs.items()]


def write_otlp_json(parts: Iterable[RunData], out: BinaryIO, top_id: str, service: str | None = None,
                    batch: int = BATCH) -> tuple[int, int]:
    """Write the run as one OTLP/JSON ``ExportTraceServiceRequest`` document (``{"resourceSpans": [...]}``, one
    entry per process run that has spans, its spans in ``(start, id)`` order) to the binary file ``out``, ``batch``
    spans at a time. Returns ``(spans, bytes written)``."""
    written = spans = 0

    def put(b: bytes) -> None:
        nonlocal written
        out.write(b)
        written += len(b)

    tid = trace_id(top_id).hex()
    scope = {"name": SCOPE_NAME, "version": __version__}
    put(b'{"resourceSpans":[')
    first_part = True
    for part in parts:
        shared: list[tuple] = []  # group -> (name, attributes, status, exception event's attributes or None)
        opened = False
        for b in span_batches(part, batch):
            for g in b.groups[len(shared):]:
                status = {} if g.error is None else {**({"message": g.error} if g.error else {}), "code": STATUS_ERROR}
                shared.append((g.name, json_attributes(g.attributes), status,
                               None if g.error is None else json_attributes({"exception.type": g.error})))
            docs = []
            for k, (sid, par, st, en, g) in enumerate(zip(b.span_id, b.parent_id, b.start, b.end, b.group)):
                name, attrs, status, exc = shared[g]
                d = {"traceId": tid, "spanId": sid.hex()}
                if par:
                    d["parentSpanId"] = par.hex()
                d.update(name=name, kind=KIND_INTERNAL, startTimeUnixNano=str(st), endTimeUnixNano=str(en),
                         attributes=json_attributes(b.own[k]) if k in b.own else attrs)
                if exc is not None:
                    d["events"] = [{"timeUnixNano": str(en), "name": "exception", "attributes": exc}]
                d["status"], d["flags"] = status, FLAGS
                docs.append(d)
            if not docs:
                continue
            if not opened:
                head = {"resource": {"attributes": json_attributes(resource_attributes(part.run, top_id, service))}}
                put((b"" if first_part else b",") + orjson.dumps(head)[:-1] + b',"scopeSpans":['
                    + orjson.dumps({"scope": scope})[:-1] + b',"spans":[')
                opened, first_part = True, False
            else:
                put(b",")
            put(orjson.dumps(docs)[1:-1])
            spans += len(docs)
        if opened:
            put(b"]}]}")
    put(b"]}")
    return spans, written
