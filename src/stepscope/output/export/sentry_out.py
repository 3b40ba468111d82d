"""A recorded run as Sentry envelopes, sent to a DSN: Sentry (sentry.io or self-hosted), Spotlight's sidecar, or
another ``stepscope serve``.

Formats as https://develop.sentry.dev/sdk/ documents them (and ``ingest.sentry`` reads them back):

- each process run of the job is one ``transaction`` event (``envelopes``): its root is the process's transaction
  span (a run's one top-level span of op ``transaction``; otherwise a root named after the program, over the
  whole process run), its other spans are the event's ``spans`` (``trace_id``, ``span_id``, ``parent_span_id``,
  ``op``, ``description`` = the span's name, ``start_timestamp``/``timestamp`` in float seconds since the epoch,
  ``status`` ``ok`` or ``internal_error``, ``data``: ``thread.id``, ``thread.name``, the span's attributes, and
  ``exception.type`` for a span that raised). Trace and span ids are the OTLP export's (``export.otlp_encode``: the same
  run gives the same ids in both). A process run of more than ``spans_per_event`` spans (default
  ``SPANS_PER_EVENT``, the Python SDK's ``max_spans``) continues in more transaction events of the same trace,
  ``NAME (part k)``, each a child of the first one's root.
- its samples are ``profile_chunk`` items (continuous profiling, format v2: ``profiler_id``, ``chunk_id``,
  ``platform`` "python", ``version`` "2", ``profile``: ``samples`` of ``timestamp`` (s), ``thread_id``,
  ``stack_id``; ``stacks`` leaf first; ``frames``; ``thread_metadata``), one per ``CHUNK_S`` seconds or
  ``CHUNK_SAMPLES`` samples, linked to the transaction through ``contexts.profile.profiler_id`` (one profiler id per
  process run) and ``contexts.trace``.

Event, chunk and profiler ids are derived from the run's ids (sha256), so a run sent twice is the same events
(Sentry and ``serve`` store it once). One item per envelope, gzip, ``X-Sentry-Auth`` from the DSN, to
``/api/PROJECT/envelope/``. Float seconds carry the times to about 0.25 us.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np
import orjson

from ... import __version__
from ...core.model import RunData
from ...core.spantable import NO_PARENT, as_table
from .otlp_encode import service_name, span_id, trace_id
from .otlp_http import SendFailed

#: spans per transaction event (sentry-python's ``max_spans`` default: Sentry keeps no more in one event)
SPANS_PER_EVENT = 1000
#: a profile chunk covers at most this many seconds (sentry-python flushes its chunks every 60 s) ...
CHUNK_S = 60.0
#: ... and holds at most this many samples
CHUNK_SAMPLES = 10_000
SDK = {"name": "stepscope", "version": __version__}
_DSN = re.compile(r"^(https?)://([^:@/\s]+)(?::[^@/\s]*)?@([^/\s]+)(/(?:[^\s]*/)?)?(\d+)/?$")


@dataclass(frozen=True, slots=True)
class Dsn:
    """A parsed DSN ``SCHEME://KEY@HOST[:PORT][/PATH]/PROJECT``: ``envelope_url``
    (``SCHEME://HOST[:PORT][/PATH]/api/PROJECT/envelope/``), ``public_key``, ``project``, ``text`` (as given)."""

    envelope_url: str
    public_key: str
    project: str
    text: str

    @property
    def auth(self) -> str:
        """The ``X-Sentry-Auth`` header."""
        return f"Sentry sentry_version=7, sentry_key={self.public_key}, sentry_client=stepscope/{__version__}"


def parse_dsn(text: str, flag: str = "--dsn") -> Dsn:
    """A DSN as Sentry shows it (``https://KEY@o1.ingest.sentry.io/42``; ``stepscope keys add`` prints serve's).
    Raises ValueError naming ``flag`` when it is not one."""
    m = _DSN.match((text or "").strip())
    if not m:
        raise ValueError(f"{flag}: {text!r} is not a DSN (SCHEME://KEY@HOST/PROJECT)")
    scheme, key, host, path, project = m.groups()
    return Dsn(f"{scheme}://{host}{path or '/'}api/{project}/envelope/", key, project, text.strip())


def derived_id(*parts: str) -> str:
    """A 32-hex-digit id (a UUID's digits) derived from ``parts``: the same run gives the same event ids."""
    return hashlib.sha256(":".join(("stepscope-sentry", *parts)).encode()).hexdigest()[:32]


def _envelope(item_type: str, payload: dict, dsn: Dsn, event_id: str | None = None, trace: dict | None = None) -> bytes:
    """One envelope of one item (https://develop.sentry.dev/sdk/data-model/envelopes/)."""
    body = orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS)
    head: dict[str, Any] = {"sent_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "dsn": dsn.text, "sdk": SDK}
    if event_id:
        head["event_id"] = event_id
    if trace:
        head["trace"] = trace
    item = {"type": item_type, "length": len(body)}
    if item_type == "profile_chunk":
        item["platform"] = "python"
    else:
        item["content_type"] = "application/json"
    return orjson.dumps(head) + b"\n" + orjson.dumps(item) + b"\n" + body + b"\n"


def _data(value: Any) -> Any:
    """A span attribute as JSON-safe data (numpy scalars and other objects as text)."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    return orjson.loads(orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS))


def envelopes(parts: Iterable[RunData], top_id: str, dsn: Dsn, service: str | None = None,
              spans_per_event: int = SPANS_PER_EVENT) -> Iterator[bytes]:
    """The envelopes of a run (``parts``: ``store.reader.load_parts``), a process run at a time: its transaction
    events, then its profile chunks."""
    for part in parts:
        yield from part_envelopes(part, top_id, dsn, service, spans_per_event)


def part_envelopes(part: RunData, top_id: str, dsn: Dsn, service: str | None = None,
                   spans_per_event: int = SPANS_PER_EVENT) -> Iterator[bytes]:
    """The envelopes of one process run (see the module's docstring)."""
    run = part.run
    t = as_table(part.spans)
    prof = part.profile
    names = prof.thread_names
    shift = run.anchor_wall_ns - run.anchor_mono_ns  # wall ns = clock ns + shift (Run.to_wall_ns)
    trace = trace_id(top_id).hex()
    profiler_id = derived_id("profiler", run.id)
    top = np.nonzero((t.parent == NO_PARENT) & t.op_mask("transaction"))[0] if len(t) else np.zeros(0, np.int64)
    if len(top) == 1:
        r0 = int(top[0])
        root = {"id": span_id(run.id, int(t.id[r0])).hex(), "name": t.names[t.name[r0]], "start": int(t.start[r0]),
                "end": int(t.end[r0]), "thread": int(t.thread[r0]), "error": int(t.error[r0])}
        rows = np.delete(np.arange(len(t)), r0)
    else:
        r0 = -1
        end = run.end_ns if run.end_ns is not None else (int(t.end.max()) if len(t) else run.start_ns)
        root = {"id": derived_id("root", run.id)[:16], "name": service_name(run, service), "start": run.start_ns,
                "end": end, "thread": int(t.thread[0]) if len(t) else 0, "error": -1}
        rows = np.arange(len(t))
    st = np.asarray(prof.sample_t_ns, np.int64)
    lo = min([root["start"]] + ([int(t.start.min())] if len(t) else []) + ([int(st.min())] if len(st) else []))
    hi = max([root["end"]] + ([int(t.end.max())] if len(t) else []) + ([int(st.max())] if len(st) else []))
    root_id = root["id"]
    tags = {"stepscope.run.id": top_id, "stepscope.process.run.id": run.id, "process.pid": str(run.pid)}
    for key in ("rank", "local_rank", "world_size", "job"):
        if (run.process or {}).get(key) is not None:
            tags[f"stepscope.{key}"] = str(run.process[key])
    env = run.env or {}
    base = {"type": "transaction", "platform": "python", "transaction_info": {"source": "custom"}, "sdk": SDK,
            "server_name": run.host or (run.process or {}).get("host") or "", "tags": tags,
            "contexts": {"runtime": {"name": env.get("implementation", "CPython"), "version": env.get("python", "")}}}
    dsc = {"trace_id": trace, "public_key": dsn.public_key, "transaction": root["name"]}

    def wall_s(ns: int) -> float:
        return (ns + shift) / 1e9

    def thread_data(th: int) -> dict:
        d = {"thread.id": str(th)}
        if th in names:
            d["thread.name"] = names[th]
        return d

    n_events = max(1, -(-len(rows) // spans_per_event))
    for k in range(n_events):
        sel = rows[k * spans_per_event:(k + 1) * spans_per_event]
        spans = []
        for r, sid, par, nm, op, s0, s1, th, er in zip(
                sel.tolist(), t.id[sel].tolist(), t.parent[sel].tolist(), t.name[sel].tolist(), t.op[sel].tolist(),
                t.start[sel].tolist(), t.end[sel].tolist(), t.thread[sel].tolist(), t.error[sel].tolist()):
            data = thread_data(th)
            for key, v in ((t.attrs.get(r) if t.attrs else None) or {}).items():
                data[key] = _data(v)
            if er >= 0:
                data["exception.type"] = t.errors[er]
            parent = root_id if par == NO_PARENT or (r0 >= 0 and par == int(t.id[r0])) else span_id(run.id, par).hex()
            spans.append({"trace_id": trace, "span_id": span_id(run.id, sid).hex(), "parent_span_id": parent,
                          "op": t.ops[op], "description": t.names[nm], "start_timestamp": wall_s(s0),
                          "timestamp": wall_s(s1), "status": "ok" if er < 0 else "internal_error", "data": data})
        if k == 0:
            name, own_id, start, end, parent_of = root["name"], root_id, lo, hi, None
            status = "ok" if root["error"] < 0 else "internal_error"
        else:
            own_id = derived_id("part", run.id, str(spans_per_event), str(k))[:16]
            name, parent_of, status = f"{root['name']} (part {k + 1})", root_id, "ok"
            start, end = int(t.start[sel].min()), int(t.end[sel].max())
        ctx_trace: dict[str, Any] = {"trace_id": trace, "span_id": own_id, "op": "stepscope.run", "status": status,
                                     "data": thread_data(root["thread"])}
        if parent_of:
            ctx_trace["parent_span_id"] = parent_of
        if k == 0 and root["error"] >= 0:
            ctx_trace["data"]["exception.type"] = t.errors[root["error"]]
        eid = derived_id("event", run.id, str(spans_per_event), str(k))  # (another cut of the spans: other events)
        event = {**base, "event_id": eid, "transaction": name, "start_timestamp": wall_s(start),
                 "timestamp": wall_s(end), "spans": spans,
                 "contexts": {**base["contexts"], "trace": ctx_trace, "profile": {"profiler_id": profiler_id}}}
        yield _envelope("transaction", event, dsn, eid, dsc)
    for chunk in profile_chunks(part, profiler_id):
        yield _envelope("profile_chunk", chunk, dsn)


def profile_chunks(part: RunData, profiler_id: str, chunk_s: float = CHUNK_S,
                   chunk_samples: int = CHUNK_SAMPLES) -> Iterator[dict]:
    """The process run's samples as ``profile_chunk`` payloads (format v2), in time order: a chunk ends after
    ``chunk_s`` seconds or ``chunk_samples`` samples; each holds only the frames and stacks its samples use."""
    prof = part.profile
    run = part.run
    shift = run.anchor_wall_ns - run.anchor_mono_ns
    t = np.asarray(prof.sample_t_ns, np.int64)
    if not len(t):
        return
    th = np.asarray(prof.sample_thread, np.int64)
    sk = np.asarray(prof.sample_stack, np.int64)
    span_ns = int(chunk_s * 1e9)
    i, k = 0, 0
    while i < len(t):
        j = min(len(t), i + chunk_samples, int(np.searchsorted(t, t[i] + span_ns, "left")))  # (> i: t[i] is in)
        used = sorted(set(sk[i:j].tolist()))
        frame_ix: dict[int, int] = {}
        frames, stacks, stack_ix = [], [], {}
        for s in used:
            leaf_first = []
            for f in reversed(prof.stacks[s]):
                if f not in frame_ix:
                    frame_ix[f] = len(frames)
                    fr = prof.frames[f]
                    frames.append({"function": fr.function, "module": fr.module, "abs_path": fr.file,
                                   "filename": os.path.basename(fr.file), "lineno": fr.line, "in_app": True})
                leaf_first.append(frame_ix[f])
            stack_ix[s] = len(stacks)
            stacks.append(leaf_first)
        threads = sorted(set(th[i:j].tolist()))
        samples = [{"timestamp": (ts + shift) / 1e9, "thread_id": str(tid), "stack_id": stack_ix[s]}
                   for ts, tid, s in zip(t[i:j].tolist(), th[i:j].tolist(), sk[i:j].tolist())]
        yield {"version": "2", "profiler_id": profiler_id, "chunk_id": derived_id("chunk", run.id, str(k)),
               "platform": "python", "release": "", "client_sdk": SDK,
               "profile": {"samples": samples, "stacks": stacks, "frames": frames,
                           "thread_metadata": {str(x): {"name": prof.thread_names.get(x, str(x))} for x in threads}}}
        i, k = j, k + 1


def send(envelopes_: Iterable[bytes], dsn: Dsn, timeout_s: float = 30.0) -> int:
    """POST each envelope (gzip) to the DSN's envelope endpoint with its ``X-Sentry-Auth``. Returns how many were
    accepted. Raises ``SendFailed`` (one line) at the first one refused or not delivered; those before it stay
    delivered."""
    import urllib.error
    import urllib.request

    n = 0
    headers = {"Content-Type": "application/x-sentry-envelope", "Content-Encoding": "gzip", "X-Sentry-Auth": dsn.auth,
               "User-Agent": f"stepscope/{__version__}"}
    for body in envelopes_:
        req = urllib.request.Request(dsn.envelope_url, data=gzip.compress(body, 6), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                resp.read()
        except urllib.error.HTTPError as e:
            raise SendFailed(f"Sentry export to {dsn.envelope_url} refused: HTTP {e.code}: {_reason(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            why = getattr(e, "reason", None) or e
            raise SendFailed(f"Sentry export: could not reach {dsn.envelope_url}: {why}") from None
        n += 1
    return n


def _reason(e) -> str:
    """An HTTP error's body as one line: Relay's and serve's ``{"detail": ...}``, else its text (300 characters)."""
    try:
        body = e.read()
    except OSError:
        body = b""
    text = ""
    try:
        doc = orjson.loads(body)
        if isinstance(doc, dict):
            text = str(doc.get("detail") or doc.get("message") or "")
    except orjson.JSONDecodeError:
        pass
    text = text or body.decode("utf-8", "replace") or str(e.reason)
    return " ".join(text.split())[:300]
