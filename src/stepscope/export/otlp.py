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

Encoding is OpenTelemetry's own (``opentelemetry-sdk``'s ``ReadableSpan`` and ``opentelemetry-exporter-otlp-proto-
common``'s ``encode_spans``, imported when called): ``requests`` gives ``ExportTraceServiceRequest`` messages of at
most ``BATCH`` spans (a million spans never make one message), ``write_otlp_json`` streams OTLP/JSON (the protobuf
JSON mapping, with the OTLP/JSON rules: trace and span ids as hex, enums as integers;
https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding) to a file, ``export.otlp_http`` sends them.
"""

from __future__ import annotations

import hashlib
import shlex
from typing import Any, BinaryIO, Iterable, Iterator

import numpy as np
import orjson

from .. import __version__
from ..model import Run, RunData
from ..spantable import NO_PARENT, as_table
from ..store.jobjoin import program_of

SCOPE_NAME = "stepscope"
#: spans per ``ExportTraceServiceRequest`` (about 0.3 KB each as protobuf: ~0.6 MB a request)
BATCH = 2048
#: span attributes kept under their own name (OpenTelemetry's or stepscope's documented ones)
KEPT_AS_IS = ("diffusion.step",)
_FUNCTION_OPS = ("function", "collective")


def trace_id(top_run_id: str) -> bytes:
    """The run's OTLP trace id (16 bytes): the first 16 bytes of ``sha256(b"stepscope-trace:" + top run id)``,
    never all zero."""
    return _nonzero(hashlib.sha256(b"stepscope-trace:" + top_run_id.encode()).digest()[:16])


def span_id(process_run_id: str, span: int) -> bytes:
    """The OTLP span id (8 bytes) of span ``span`` (its id in process run ``process_run_id``): the first 8 bytes
    of ``sha256(b"stepscope-span:" + process run id + b":" + str(span))``, never all zero."""
    return _nonzero(hashlib.sha256(b"stepscope-span:%s:%d" % (process_run_id.encode(), span)).digest()[:8])


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
    job = p.get("job") or ((run.settings or {}).get("extra") or {}).get("job")  # torchrun's, or `run --job`
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


def span_batches(part: RunData, top_id: str, service: str | None = None, batch: int = BATCH) -> Iterator[list]:
    """The spans of one process run (``part``: a ``store.reader.load_parts`` item, on its own ids) as lists of at
    most ``batch`` OpenTelemetry SDK ``ReadableSpan`` objects, in ``(start, id)`` order, sharing one ``Resource``
    (``resource_attributes``) and the ``stepscope`` scope. Times in wall ns."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    run = part.run
    resource = Resource(resource_attributes(run, top_id, service))
    scope = InstrumentationScope(SCOPE_NAME, __version__)
    tid = int.from_bytes(trace_id(top_id), "big")
    flags = TraceFlags(TraceFlags.SAMPLED)
    t = as_table(part.spans)
    names = part.profile.thread_names
    shift = run.anchor_wall_ns - run.anchor_mono_ns  # wall ns = clock ns + shift (Run.to_wall_ns)
    rid = run.id
    code = (run.env or {}).get("code") or {}  # span name -> [file, line] of the traced function (Patcher)

    def sid(s: int) -> int:
        return int.from_bytes(span_id(rid, s), "big")

    for lo in range(0, len(t), batch):
        rows = np.arange(lo, min(len(t), lo + batch))
        out = []
        for r, s, par, nm, op, st, en, th, er in zip(
                rows.tolist(), t.id[rows].tolist(), t.parent[rows].tolist(), t.name[rows].tolist(),
                t.op[rows].tolist(), (t.start[rows] + shift).tolist(), (t.end[rows] + shift).tolist(),
                t.thread[rows].tolist(), t.error[rows].tolist()):
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
            a.update(span_attributes(t.attrs.get(r) if t.attrs else None))
            status, events = Status(StatusCode.UNSET), ()
            if er >= 0:
                etype = t.errors[er]
                status = Status(StatusCode.ERROR, etype)
                events = (Event("exception", {"exception.type": etype}, timestamp=en),)
            ctx = SpanContext(tid, sid(s), is_remote=False, trace_flags=flags)
            parent = None if par == NO_PARENT else SpanContext(tid, sid(par), is_remote=False, trace_flags=flags)
            out.append(ReadableSpan(name, ctx, parent, resource, a, events, (), SpanKind.INTERNAL, None, status,
                                    st, en, scope))
        yield out


def requests(parts: Iterable[RunData], top_id: str, service: str | None = None, batch: int = BATCH) -> Iterator:
    """``ExportTraceServiceRequest`` protobuf messages (``opentelemetry-proto``) of at most ``batch`` spans each,
    one process run (one resource) per message, encoded by OpenTelemetry's ``encode_spans``."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    for part in parts:
        for spans in span_batches(part, top_id, service, batch):
            yield encode_spans(spans)


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def otlp_json(message) -> dict:
    """An OTLP protobuf message as OTLP/JSON (a dict): the protobuf JSON mapping (lowerCamelCase names, int64 as
    strings) with enums as integers and trace/span ids as lowercase hex, as the OTLP specification requires."""
    import base64

    from google.protobuf.json_format import MessageToDict

    doc = MessageToDict(message, use_integers_for_enums=True)

    def fix(span: dict) -> None:
        for k in _ID_KEYS:
            if k in span:
                span[k] = base64.b64decode(span[k]).hex()
        for link in span.get("links", ()):
            fix(link)

    for rs in doc.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                fix(span)
    return doc


def write_otlp_json(parts: Iterable[RunData], out: BinaryIO, top_id: str, service: str | None = None,
                    batch: int = BATCH) -> tuple[int, int]:
    """Write the run as one OTLP/JSON ``ExportTraceServiceRequest`` document (``{"resourceSpans": [...]}``, one
    entry per process run that has spans) to the binary file ``out``, a batch of spans at a time (memory bounded by
    ``batch``, not by the run). Returns ``(spans, bytes written)``."""
    written = spans = 0

    def put(b: bytes) -> None:
        nonlocal written
        out.write(b)
        written += len(b)

    put(b'{"resourceSpans":[')
    first_part = True
    for part in parts:
        opened = False
        for message in requests([part], top_id, service, batch):
            rs = otlp_json(message)["resourceSpans"][0]
            ss = rs["scopeSpans"][0]
            if not opened:
                head = {k: v for k, v in rs.items() if k != "scopeSpans"}
                scope = {k: v for k, v in ss.items() if k != "spans"}
                put((b"" if first_part else b",") + orjson.dumps(head)[:-1] + b',"scopeSpans":['
                    + orjson.dumps(scope)[:-1] + b',"spans":[')
                opened, first_part = True, False
            else:
                put(b",")
            put(orjson.dumps(ss["spans"])[1:-1])
            spans += len(ss["spans"])
        if opened:
            put(b"]}]}")
    put(b"]}")
    return spans, written
