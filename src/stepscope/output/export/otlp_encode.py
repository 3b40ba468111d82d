"""A recorded run as OpenTelemetry traces (OTLP): one trace per run, one resource per process run of its job.

The mapping (``docs/backends.md``; the same one ``stepscope serve`` reads back) is the project's contract for
issue 30:

- trace id: the first 16 bytes of ``sha256(b"stepscope-trace:" + top run id)``; span id: the first 8 bytes of
  ``sha256(b"stepscope-span:" + process run id + b":" + str(span id))`` (a zero id is bumped to 1): the same run
  exported twice gives the same ids. A span's parent keeps its parent's id; a process run's top spans have none.
- times: ``start_time_unix_nano``/``end_time_unix_nano`` are wall ns (the process run's anchor, ``Run.to_wall_ns``).
- resource (one per process run): ``service.name`` (``--service``, else the program: script file name or ``-m``
  module), ``host.name``, ``process.pid``, ``process.parent_pid``, ``process.command_line``,
  ``process.runtime.name``/``version``, ``stepscope.run.id`` (the top run), ``stepscope.process.run.id``,
  ``stepscope.job.id`` (``TORCHELASTIC_RUN_ID`` when the process had one, else ``stepscope run --job``), ``stepscope.rank``,
  ``stepscope.local_rank``, ``stepscope.world_size``.
- scope: ``stepscope`` at ``stepscope.__version__``.
- span: its name, kind INTERNAL, ``code.function.name``, ``code.file.path``, ``code.line.number`` (traced functions:
  the run's ``env["code"]``), ``thread.id``, ``thread.name``,
  ``stepscope.op``, ``diffusion.step`` as is, every other attribute as ``stepscope.<key>``; an error: status ERROR
  with the exception type as the message and an ``exception`` event carrying ``exception.type``.

Samples are not exported (OTLP profiles are still alpha): the sampled stacks stay in the store, in the Sentry export
(``export.sentry_out``) and in the Chrome/speedscope files.

The spans are read from the run's columns (``spantable.SpanTable``) a batch of ``BATCH`` at a time
(``span_batches``: ids, parents, wall times and a group per name, op, thread and error, whose attributes are
made once), never one Python object per span. ``requests`` builds OpenTelemetry's own protobuf messages
(``opentelemetry-proto``'s ``ExportTraceServiceRequest``, imported when called) from them: each group's ``Span``
is made and serialized once by protobuf, and every span of the group is parsed from those bytes
(``MergeFromString``) and given its ids and times; ``export.otlp_http`` sends the serialized requests and
``export.otlp_json`` writes the same content as OTLP/JSON. The messages are the ones OpenTelemetry's SDK encoder
(``opentelemetry-exporter-otlp-proto-common``'s ``encode_spans`` of SDK ``ReadableSpan``s) makes for the same
spans: span flags ``SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`` (256), kind INTERNAL, a status on every span (UNSET:
an empty one); tests/test_export_otlp.py checks them against it.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import orjson

from ... import __version__
from ...core.model import Run, RunData
from ...core.spantable import NO_PARENT, as_table
from ...store.jobjoin import program_of
from ...core.steprules import STEP_ATTR

SCOPE_NAME = "stepscope"
#: spans per ``ExportTraceServiceRequest`` (about 0.3 KB each as protobuf: ~0.6 MB a request)
BATCH = 2048
#: span attributes kept under their own name (OpenTelemetry's or stepscope's documented ones)
KEPT_AS_IS = (STEP_ATTR,)
_FUNCTION_OPS = ("function", "collective", "process_group")


def trace_id(top_run_id: str) -> bytes:
    """The run's OTLP trace id (16 bytes): the first 16 bytes of ``sha256(b"stepscope-trace:" + top run id)``,
    never all zero."""
    return _nonzero(hashlib.sha256(b"stepscope-trace:" + top_run_id.encode()).digest()[:16])


def span_id(process_run_id: str, span: int) -> bytes:
    """The OTLP span id (8 bytes) of span ``span`` (its id in process run ``process_run_id``): the first 8 bytes
    of ``sha256(b"stepscope-span:" + process run id + b":" + str(span))``, never all zero."""
    return _nonzero(hashlib.sha256(b"stepscope-span:%s:%d" % (process_run_id.encode(), span)).digest()[:8])


def span_ids(process_run_id: str, spans: Iterable[int]) -> list[bytes]:
    """``span_id(process_run_id, s)`` of each of ``spans`` (ints), in that order (one prefix, one hash a span)."""
    sha, pre = hashlib.sha256, b"stepscope-span:%s:" % process_run_id.encode()
    out = [sha(b"%b%d" % (pre, s)).digest()[:8] for s in spans]
    return [b if b != _ZERO8 else _nonzero(b) for b in out] if _ZERO8 in out else out


_ZERO8 = bytes(8)


def _nonzero(b: bytes) -> bytes:
    return b if any(b) else b[:-1] + b"\x01"


def service_name(run: Run, service: str | None = None) -> str:
    """``service`` when given, else the run's program (``store.jobjoin.program_of``: the script's file name or the
    ``-m`` module), else its first word."""
    return service or program_of(run.command) or (run.command[0] if run.command else "stepscope")


def resource_attributes(run: Run, top_id: str, service: str | None = None) -> dict[str, Any]:
    """The resource attributes of process run ``run`` of the job whose top run is ``top_id`` (the contract's list,
    OpenTelemetry's semantic conventions where they exist; facts that were not recorded are left out)."""
    p = run.process or {}
    out: dict[str, Any] = {"service.name": service_name(run, service)}
    host = run.host or p.get("host")
    if host:
        out["host.name"] = str(host)
    if run.pid:
        out["process.pid"] = int(run.pid)
    if isinstance(p.get("ppid"), int):
        out["process.parent_pid"] = p["ppid"]
    if run.command:
        out["process.command_line"] = shlex.join(str(a) for a in run.command)
    env = run.env or {}
    if env.get("implementation"):
        out["process.runtime.name"] = str(env["implementation"]).lower()
    if env.get("python"):
        out["process.runtime.version"] = str(env["python"])
    out["stepscope.run.id"] = top_id
    out["stepscope.process.run.id"] = run.id
    job = p.get("job") or run.meta.job  # torchrun's, or `run --job`
    if job is not None:
        out["stepscope.job.id"] = str(job)
    for key in ("rank", "local_rank", "world_size"):
        if isinstance(p.get(key), int):
            out[f"stepscope.{key}"] = p[key]
    return out


def attribute_value(v: Any) -> Any:
    """``v`` as an OpenTelemetry attribute value: str, bool, int (int64), float, or a list of one of those; any
    other value (a dict, a mixed list, an int past 64 bits, None) as its JSON text."""
    if isinstance(v, (str, bool, float)):
        return v
    if isinstance(v, int):
        return v if -2**63 <= v < 2**63 else str(v)
    if isinstance(v, (list, tuple)) and v and len({type(x) for x in v}) == 1 and isinstance(v[0], (str, bool, float, int)) \
            and not (isinstance(v[0], int) and not isinstance(v[0], bool) and any(not -2**63 <= x < 2**63 for x in v)):
        return list(v)
    return orjson.dumps(v, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def span_attributes(attrs: dict | None) -> dict[str, Any]:
    """A stepscope span's own attributes as OTLP span attributes: ``KEPT_AS_IS`` and ``stepscope.*`` keys as they
    are, every other key as ``stepscope.<key>``."""
    out: dict[str, Any] = {}
    for k, v in (attrs or {}).items():
        key = k if k in KEPT_AS_IS or k.startswith("stepscope.") else f"stepscope.{k}"
        out[key] = attribute_value(v)
    return out


@dataclass(frozen=True, slots=True)
class SpanGroup:
    """What the spans of one (name, op, thread, error type) of a process run share: ``name``, ``attributes`` (their
    OTLP attributes, in order: ``code.function.name``, ``code.file.path``, ``code.line.number`` for traced
    functions, ``thread.id``, ``thread.name``, ``stepscope.op``), ``error`` (the exception type; None: ended ok)."""

    name: str
    attributes: dict[str, Any]
    error: str | None


@dataclass(frozen=True, slots=True)
class SpanBatch:
    """At most ``BATCH`` spans of one process run as columns, in ``(start, id)`` order, one entry a span:
    ``span_id`` and ``parent_id`` (8-byte OTLP ids; ``b""``: no parent), ``start`` and ``end`` (wall ns, ints),
    ``group`` (index into ``groups``: the process run's ``SpanGroup``s so far, shared by its batches), ``own``
    (index in the batch -> the span's whole attribute dict, for the spans that have attributes of their own)."""

    span_id: list[bytes]
    parent_id: list[bytes]
    start: list[int]
    end: list[int]
    group: list[int]
    own: dict[int, dict[str, Any]]
    groups: list[SpanGroup]

    def __len__(self) -> int:
        return len(self.span_id)


def span_batches(part: RunData, batch: int = BATCH) -> Iterator[SpanBatch]:
    """The spans of one process run (``part``: a ``store.reader.load_parts`` item, on its own ids) as
    ``SpanBatch``es of at most ``batch`` spans, read from its span columns (no object per span). Times in wall ns
    (``Run.to_wall_ns``); ids as ``span_id``."""
    run = part.run
    t = as_table(part.spans)
    names = part.profile.thread_names
    shift = run.anchor_wall_ns - run.anchor_mono_ns  # wall ns = clock ns + shift (Run.to_wall_ns)
    rid = run.id
    code = (run.env or {}).get("code") or {}  # span name -> [file, line] of the traced function (Patcher)
    groups: list[SpanGroup] = []
    index: dict[tuple, int] = {}
    parents: dict[int, bytes] = {}  # parent span -> its OTLP id (the parents a batch meets again)

    def group(key: tuple) -> int:
        nm, op, th, er = key
        name, op_name = t.names[nm], t.ops[op]
        a: dict[str, Any] = {}
        if op_name in _FUNCTION_OPS:
            a["code.function.name"] = name
            where = code.get(name)
            if isinstance(where, list) and len(where) == 2:
                a["code.file.path"], a["code.line.number"] = str(where[0]), int(where[1])
        a["thread.id"] = int(th)
        if th in names:
            a["thread.name"] = names[th]
        a["stepscope.op"] = op_name
        groups.append(SpanGroup(name, a, t.errors[er] if er >= 0 else None))
        index[key] = len(groups) - 1
        return len(groups) - 1

    for lo in range(0, len(t), batch):
        hi = min(len(t), lo + batch)
        ids = span_ids(rid, t.id[lo:hi].tolist())
        par = t.parent[lo:hi].tolist()
        if len(parents) > 4 * batch:
            parents.clear()
        missing = list({p for p in par if p != NO_PARENT and p not in parents})
        if missing:
            parents.update(zip(missing, span_ids(rid, missing)))
        keys = zip(t.name[lo:hi].tolist(), t.op[lo:hi].tolist(), t.thread[lo:hi].tolist(), t.error[lo:hi].tolist())
        gs = [index[k] if k in index else group(k) for k in keys]
        own = {}
        if t.attrs:
            for r in range(lo, hi):
                extra = t.attrs.get(r)
                if extra:
                    own[r - lo] = {**groups[gs[r - lo]].attributes, **span_attributes(extra)}
        yield SpanBatch(ids, [b"" if p == NO_PARENT else parents[p] for p in par], (t.start[lo:hi] + shift).tolist(),
                        (t.end[lo:hi] + shift).tolist(), gs, own, groups)


def any_value(v: Any):
    """An ``attribute_value`` result (str, bool, int, float, or a list of one of those) as an OTLP ``AnyValue``
    protobuf message (``opentelemetry.proto.common.v1``), as the SDK's encoder makes it."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue

    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, str):
        return AnyValue(string_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    return AnyValue(array_value=ArrayValue(values=[any_value(x) for x in v]))


def key_values(attrs: dict[str, Any]) -> list:
    """``attrs`` (values as ``attribute_value`` gives them) as OTLP ``KeyValue`` messages, in order."""
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    return [KeyValue(key=k, value=any_value(v)) for k, v in attrs.items()]


def requests(parts: Iterable[RunData], top_id: str, service: str | None = None, batch: int = BATCH) -> Iterator:
    """``ExportTraceServiceRequest`` protobuf messages (``opentelemetry-proto``) of at most ``batch`` spans each,
    one process run (one resource: ``resource_attributes``; scope ``stepscope``) per message; see the module's
    docstring for how they are built."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status

    tid = trace_id(top_id)
    scope = InstrumentationScope(name=SCOPE_NAME, version=__version__)
    flags = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    for part in parts:
        resource = Resource(attributes=key_values(resource_attributes(part.run, top_id, service)))
        templates: list[bytes] = []  # group -> its Span (no ids, no times), serialized once
        for b in span_batches(part, batch):
            for g in b.groups[len(templates):]:
                span = Span(trace_id=tid, name=g.name, kind=Span.SpanKind.SPAN_KIND_INTERNAL,
                            attributes=key_values(g.attributes), status=Status(), flags=flags)
                if g.error is not None:
                    span.status.code, span.status.message = Status.StatusCode.STATUS_CODE_ERROR, g.error
                    span.events.add(name="exception", attributes=key_values({"exception.type": g.error}))
                templates.append(span.SerializeToString())
            req = ExportTraceServiceRequest()
            rs = req.resource_spans.add()
            rs.resource.CopyFrom(resource)
            ss = rs.scope_spans.add()
            ss.scope.CopyFrom(scope)
            add, groups, own = ss.spans.add, b.groups, b.own
            for k, (sid, par, st, en, g) in enumerate(zip(b.span_id, b.parent_id, b.start, b.end, b.group)):
                s = add()
                s.MergeFromString(templates[g])
                s.span_id, s.start_time_unix_nano, s.end_time_unix_nano = sid, st, en
                if par:
                    s.parent_span_id = par
                if groups[g].error is not None:
                    s.events[0].time_unix_nano = en
                if own and k in own:
                    s.ClearField("attributes")
                    s.attributes.extend(key_values(own[k]))
            yield req
