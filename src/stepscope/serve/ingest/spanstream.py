"""The Sentry SDK's streamed spans (``span`` envelope items with content type
``application/vnd.sentry.items.span.v2+json``: sentry-python's ``trace_lifecycle="stream"``, also
``_experiments={"trace_lifecycle": "stream"}``) as stepscope's trace records, stored like OTLP traces (one run per
trace: ``ingest.otlp_decode.TraceRecord``).

Format, as sentry-python 2.75 writes it (``sentry_sdk/_span_batcher.py``, ``traces.StreamedSpan._to_json``): the
item's payload is ``{"version": 2, "items": [span, ...]}``, each span ``trace_id`` (32 hex digits), ``span_id`` (16),
``parent_span_id`` (absent at the segment's root), ``name``, ``status`` ("ok" or "error"), ``is_segment``,
``start_timestamp``/``end_timestamp`` (float seconds since the epoch) and ``attributes`` as ``{key: {"type": ...,
"value": ...}}``. Every span repeats the SDK's facts (``server.address``, ``sentry.environment``, ``sentry.release``,
``sentry.sdk.name``/``version``, ``process.runtime.*``): they become the trace's resource (``server.address`` as
``host.name``) and leave the span's attributes; ``sentry.op`` gives the op, ``thread.id``/``thread.name`` the thread.
A malformed span raises EnvelopeError naming it (the whole envelope is refused, as for transactions).
"""

from __future__ import annotations

from .envelope import EnvelopeError
from .otlp_decode import TraceRecord, resource_key, split_attrs

#: span attributes every span of the SDK repeats -> the resource key they become
RESOURCE_ATTRS = {"server.address": "host.name", "sentry.environment": "sentry.environment",
                  "sentry.release": "sentry.release", "sentry.sdk.name": "telemetry.sdk.name",
                  "sentry.sdk.version": "telemetry.sdk.version", "process.runtime.name": "process.runtime.name",
                  "process.runtime.version": "process.runtime.version"}
#: attributes that say nothing a run does not already hold
DROPPED = frozenset({"sentry.trace_lifecycle", "sentry.segment.id", "sentry.segment.name", "sentry.origin",
                     "sentry.op"})
_MAX_S = 2**62 / 1e9 - 1.0


def _hex(v, n: int, what: str) -> str:
    if type(v) is not str or len(v) != n:
        raise EnvelopeError(f"{what}: not {n} hex digits")
    try:
        int(v, 16)
    except ValueError:
        raise EnvelopeError(f"{what}: not {n} hex digits") from None
    return v.lower()


def _sid(v: str) -> int:
    """16 hex digits as an int64 (as ``otlp.span_id`` reads the same 8 bytes)."""
    x = int(v, 16)
    return x - 2**64 if x >= 2**63 else x


def _seconds(v, what: str) -> int:
    if type(v) not in (int, float) or not 0 < v < _MAX_S:
        raise EnvelopeError(f"{what}: not a timestamp (float seconds)")
    return round(v * 1e9)


def spans_v2(doc: dict, what: str) -> list[TraceRecord]:
    """A ``span`` item's payload -> one TraceRecord per trace in it. Raises EnvelopeError naming the field."""
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise EnvelopeError(f"{what}: not a span v2 payload ({{\"version\": 2, \"items\": [...]}})")
    out: dict[tuple[str, str], TraceRecord] = {}
    for i, s in enumerate(doc["items"]):
        w = f"{what}: items[{i}]"
        if not isinstance(s, dict):
            raise EnvelopeError(f"{w}: not an object")
        trace = _hex(s.get("trace_id"), 32, f"{w}.trace_id")
        sid = _sid(_hex(s.get("span_id"), 16, f"{w}.span_id"))
        parent = s.get("parent_span_id")
        parent = _sid(_hex(parent, 16, f"{w}.parent_span_id")) if parent else None
        start = _seconds(s.get("start_timestamp"), f"{w}.start_timestamp")
        end = max(start, _seconds(s.get("end_timestamp"), f"{w}.end_timestamp")) if s.get("end_timestamp") is not None \
            else start
        name = s.get("name")
        if name is not None and type(name) is not str:
            raise EnvelopeError(f"{w}.name: not a string")
        raw = s.get("attributes") or {}
        if not isinstance(raw, dict):
            raise EnvelopeError(f"{w}.attributes: not an object")
        resource, attrs = {}, {}
        for k, a in raw.items():
            if not isinstance(a, dict):
                raise EnvelopeError(f"{w}.attributes.{k}: not {{type, value}}")
            v = a.get("value")
            if isinstance(v, (dict, list)) and any(isinstance(x, (dict, list)) for x in (v.values() if
                                                                                         isinstance(v, dict) else v)):
                raise EnvelopeError(f"{w}.attributes.{k}: not a plain value or a list of them")
            if k in RESOURCE_ATTRS:
                resource[RESOURCE_ATTRS[k]] = v
            elif k not in DROPPED:
                attrs[k] = v
        tid = attrs.get("thread.id")
        if type(tid) is str and tid.isdigit() and len(tid) < 19:
            attrs["thread.id"] = int(tid)
        op, tid, tname, kept = split_attrs(attrs, str((raw.get("sentry.op") or {}).get("value") or "function")[:200])
        status = s.get("status")
        err = None if status in (None, "ok") else str(status)[:200]
        rkey = resource_key(resource)
        rec = out.get((trace, rkey))
        if rec is None:
            rec = out[(trace, rkey)] = TraceRecord("sentry", trace, resource, rkey, [])
        rec.spans.append((sid, parent, (name or "span")[:1000], op, start, end, tid, err, kept, tname))
    return list(out.values())
