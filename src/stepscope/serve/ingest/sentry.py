"""Sentry's event payloads turned into stepscope's records, on the wall clock (ns since the epoch).

Formats, as the Python SDK (2.x) writes them and https://develop.sentry.dev/sdk/ documents them:

- ``transaction`` event: ``event_id``, ``transaction`` (name), ``start_timestamp``/``timestamp`` (RFC 3339
  strings or float seconds), ``contexts.trace`` (root ``span_id``, ``op``, ``status``, ``data.thread.id``),
  ``contexts.profile.profiler_id`` (continuous profiling), ``spans`` (``span_id``, ``parent_span_id``, ``op``,
  ``description``, timestamps, ``status``, ``data``).
- ``profile``, sampled profile v1: ``timestamp`` (profile start), ``transactions[].id`` (the event it
  belongs to), ``profile.samples[]`` (``elapsed_since_start_ns``, ``thread_id``, ``stack_id``),
  ``profile.stacks`` (frame indices, leaf first), ``profile.frames``, ``profile.thread_metadata``.
- ``profile_chunk``, continuous profile v2: ``profiler_id``, ``chunk_id``, ``profile.samples[]``
  (``timestamp`` in float seconds, ``thread_id``, ``stack_id``), stacks and frames as in v1.

Everything is validated here, before anything is written: a malformed field raises EnvelopeError
naming it, so the whole envelope is refused (HTTP 400) and nothing of it is stored.
"""

from __future__ import annotations

import hashlib
import json
import math
from itertools import chain
from operator import itemgetter
from dataclasses import dataclass, field
from datetime import datetime, timezone

import orjson

from ...core.jsondepth import KEPT_DEPTH, TOO_DEEP, within
from .envelope import Envelope, EnvelopeError

SENTRY_PYTHON_HZ = 101.0  # sentry_sdk.profiler: DEFAULT_SAMPLING_FREQUENCY
#: thread names of the Python SDK's own threads: sentry.profiler.ThreadScheduler, sentry.monitor,
#: sentry-sdk.BackgroundWorker
SDK_THREAD_PREFIXES = ("sentry.", "sentry-sdk.")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MIN_NS, _MAX_NS = 0, 2**62  # ns since the epoch (up to year 2116)


@dataclass(slots=True)
class TransactionRecord:
    """One transaction with its spans. Times: wall clock, ns since the epoch.

    ``spans``: ``(sentry span id, parent sentry span id | None, name, op, start_ns, end_ns, thread id,
    error status | None, attrs)``; the root span (the transaction itself) is not among them.
    """

    event_id: str
    name: str
    op: str
    status: str | None
    start_ns: int
    end_ns: int
    span_id: str
    thread_id: int
    spans: list[tuple]
    profiler_id: str | None
    thread_names: dict[int, str]
    meta: dict


@dataclass(slots=True)
class ProfileRecord:
    """A sampled profile (v1) or a profile chunk (v2) in stepscope's shape: ``frames`` as
    ``(function, module, file, line)``, ``stacks`` root first, ``samples`` as ``(wall ns, thread id,
    stack index)`` in time order. ``key``: the transaction's event id (v1) or the chunk id (v2)."""

    kind: str
    key: str
    profiler_id: str | None
    frames: list[tuple]
    stacks: list[tuple[int, ...]]
    samples: list[tuple[int, int, int]]
    thread_names: dict[int, str]
    transaction_ids: list[str] = field(default_factory=list)

    @property
    def start_ns(self) -> int:
        return self.samples[0][0] if self.samples else 0

    @property
    def end_ns(self) -> int:
        return self.samples[-1][0] if self.samples else 0

    def hz(self) -> float | None:
        """Sampling rate from the median interval between a thread's samples (samples/s), or None."""
        by_thread: dict[int, int] = {}
        deltas = []
        for t, tid, _ in self.samples:
            prev = by_thread.get(tid)
            if prev is not None and t > prev:
                deltas.append(t - prev)
            by_thread[tid] = t
        if len(deltas) < 3:
            return None
        deltas.sort()
        return round(1e9 / deltas[len(deltas) // 2], 1)


@dataclass(slots=True)
class Batch:
    """What one envelope carries, validated: transactions, profiles and chunks, plus item counts by type
    (``ignored`` counts the types stepscope does not store)."""

    transactions: list[TransactionRecord]
    profiles: list[ProfileRecord]
    chunks: list[ProfileRecord]
    counts: dict[str, int]
    ignored: dict[str, int]
    event_id: str | None
    #: traces as ``ingest.otlp_decode.TraceRecord`` (OTLP requests, the SDK's streamed ``span`` items): one run per trace
    #: and resource
    traces: list = field(default_factory=list)


def timestamp_ns(v, what: str) -> int:
    """RFC 3339 string or float seconds -> ns since the epoch. Raises EnvelopeError naming ``what``."""
    if isinstance(v, bool):
        raise EnvelopeError(f"{what}: not a timestamp")
    if isinstance(v, (int, float)):
        if not math.isfinite(v):
            raise EnvelopeError(f"{what}: not a finite timestamp")
        ns = round(v * 1e9)
    elif isinstance(v, str):
        try:
            dt = datetime.fromisoformat(v.replace("z", "Z"))
        except ValueError:
            raise EnvelopeError(f"{what}: {v[:40]!r} is not an RFC 3339 timestamp") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        d = dt - _EPOCH
        ns = (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000
    else:
        raise EnvelopeError(f"{what}: not a timestamp")
    if not _MIN_NS <= ns < _MAX_NS:
        raise EnvelopeError(f"{what}: timestamp out of range")
    return ns


#: float seconds whose ns fit ``[_MIN_NS, _MAX_NS)`` (a margin for the rounding)
_MIN_S, _MAX_S = 0.0, _MAX_NS / 1e9 - 1.0


def _ts(v, what, *parts) -> int:
    """``timestamp_ns`` with its message made only on error (``what`` and ``parts`` joined): the hot path of
    the ingest does no string formatting per span or sample."""
    if type(v) is float and _MIN_S <= v < _MAX_S:
        return round(v * 1e9)
    return timestamp_ns(v, "".join((what, *parts)))


class _Tids(dict):
    """Thread ids (strings, as the SDK sends them) already converted in one item: the same few values repeat in
    every sample."""

    def get_id(self, v, what, *parts) -> int:
        if type(v) is not str:  # (only strings are kept: 1, 1.0 and True are equal keys, and the last two wrong)
            return thread_id(v, "".join((what, *parts)))
        try:
            return self[v]
        except KeyError:
            t = self[v] = thread_id(v, "".join((what, *parts)))
            return t


def thread_id(v, what: str) -> int:
    """A Sentry thread id (string or number; Python's ``threading.get_ident()``) as an int64. Ids that
    are not integers (other platforms name threads) map to a stable 62-bit hash."""
    if isinstance(v, bool) or v is None:
        raise EnvelopeError(f"{what}: not a thread id")
    if isinstance(v, int):
        if 0 <= v < 2**63:
            return v
        v = str(v)
    if isinstance(v, float):
        raise EnvelopeError(f"{what}: not a thread id")
    if not isinstance(v, str):
        raise EnvelopeError(f"{what}: not a thread id")
    if v.isdigit() and len(v) < 19:
        return int(v)
    return int.from_bytes(hashlib.blake2b(v.encode(), digest_size=8).digest(), "big") >> 2


def _obj(v, what: str) -> dict:
    if not isinstance(v, dict):
        raise EnvelopeError(f"{what}: not an object")
    return v


def _list(v, what: str) -> list:
    if not isinstance(v, list):
        raise EnvelopeError(f"{what}: not a list")
    return v


def _kept(v, what: str):
    """``v``, a value kept as it came (a span's ``data``, ``tags``): EnvelopeError naming ``what`` when it nests past
    ``jsondepth.KEPT_DEPTH`` (it would be stored, and meet Python's recursion limit or orjson's in every reader)."""
    if (type(v) is dict or type(v) is list) and not within(v):
        raise EnvelopeError(f"{what}: nested more than {KEPT_DEPTH} levels deep")
    return v


def _str(v, what: str, default: str | None = None) -> str | None:
    if v is None:
        return default
    if not isinstance(v, str):
        raise EnvelopeError(f"{what}: not a string")
    return v


def _hexid(v, what: str) -> str:
    if not isinstance(v, str) or not v or len(v) > 64:
        raise EnvelopeError(f"{what}: not an id")
    return v.replace("-", "").lower()


#: Sentry's ``modules`` (installed packages) kept for ``stepscope diff``: the libraries that change speed
_MODULES_KEPT = ("torch", "diffusers", "transformers", "accelerate", "xformers", "numpy", "safetensors", "triton", "peft",
                 "sentry-sdk", "sentry_sdk")
_FACTS_MAX_BYTES = 16_384


def environment_facts(doc: dict, contexts: dict) -> dict:
    """What an event says about the environment, for ``stepscope diff``: its contexts other than ``trace``
    and ``profile`` (Sentry's ``runtime``, ``os``, ``device``, ``gpu``, and the program's own, e.g.
    ``set_context("torch", {...})``), its ``tags``, and the versions of the speed-relevant libraries in
    ``modules``. Only plain values; a part larger than 16 KiB as JSON is left out. Never raises."""
    import json

    out: dict = {}

    def plain(v, depth: int = 0):
        if isinstance(v, (str, int, float, bool)) or v is None:
            return v[:500] if isinstance(v, str) else v
        if isinstance(v, dict) and depth < 3:
            return {str(k)[:200]: plain(x, depth + 1) for k, x in list(v.items())[:100]}
        if isinstance(v, list) and depth < 3:
            return [plain(x, depth + 1) for x in v[:20]]
        return str(v)[:200]

    ctx = {k: plain(v) for k, v in contexts.items() if k not in ("trace", "profile") and isinstance(v, dict)}
    tags = doc.get("tags")
    if isinstance(tags, list):  # the SDK's wire form may be [[key, value], ...]
        tags = {str(t[0]): t[1] for t in tags if isinstance(t, (list, tuple)) and len(t) == 2}
    mods = doc.get("modules") if isinstance(doc.get("modules"), dict) else {}
    parts = {"contexts": ctx, "tags": plain(tags) if isinstance(tags, dict) else {},
             "modules": {k.replace("-", "_"): str(v)[:100] for k, v in mods.items() if k in _MODULES_KEPT}}
    for k, v in parts.items():
        if v and len(json.dumps(v, default=str)) <= _FACTS_MAX_BYTES:
            out[k] = v
    return out


def transaction(doc: dict, what: str) -> TransactionRecord:
    """A ``transaction`` event payload -> TransactionRecord. Raises EnvelopeError."""
    event_id = _hexid(doc.get("event_id"), f"{what}: event_id")
    contexts = _obj(doc.get("contexts") or {}, f"{what}: contexts")
    trace = _obj(contexts.get("trace") or {}, f"{what}: contexts.trace")
    tdata = _obj(trace.get("data") or {}, f"{what}: contexts.trace.data")
    start = timestamp_ns(doc.get("start_timestamp"), f"{what}: start_timestamp")
    end = max(start, timestamp_ns(doc.get("timestamp"), f"{what}: timestamp"))
    root_tid = thread_id(tdata["thread.id"], f"{what}: contexts.trace.data.thread.id") if tdata.get("thread.id") is not None else 0
    names: dict[int, str] = {}
    if tdata.get("thread.name") is not None:
        names[root_tid] = str(tdata["thread.name"])
    spans = []
    tids = _Tids()
    for i, s in enumerate(_list(doc.get("spans") or [], f"{what}: spans")):
        # messages are made only when a value is wrong (the validators below raise then): no formatting per span
        if type(s) is not dict:
            _obj(s, f"{what}: spans[{i}]")
        sid = s.get("span_id")
        sid = sid.replace("-", "").lower() if type(sid) is str and 0 < len(sid) <= 64 else \
            _hexid(sid, f"{what}: spans[{i}].span_id")
        parent = s.get("parent_span_id")
        if parent:
            parent = parent.replace("-", "").lower() if type(parent) is str and len(parent) <= 64 else \
                _hexid(parent, f"{what}: spans[{i}].parent_span_id")
        else:
            parent = None
        s0 = _ts(s.get("start_timestamp"), what, ": spans[", str(i), "].start_timestamp")
        s1 = max(s0, _ts(s.get("timestamp"), what, ": spans[", str(i), "].timestamp"))
        data = s.get("data") or {}
        if type(data) is not dict:
            _obj(data, f"{what}: spans[{i}].data")
        raw_tid = data.get("thread.id")
        tid = tids.get_id(raw_tid, what, ": spans[", str(i), "].data.thread.id") if raw_tid is not None else root_tid
        if data.get("thread.name") is not None:
            names.setdefault(tid, str(data["thread.name"]))
        op = s.get("op")
        if type(op) is not str:
            op = _str(op, f"{what}: spans[{i}].op", "") or ""
        name = s.get("description")
        if type(name) is not str:
            name = _str(name, f"{what}: spans[{i}].description")
        name = name or op or "span"
        status = s.get("status")
        if status is not None and type(status) is not str:
            _str(status, f"{what}: spans[{i}].status")
        attrs = {"sentry.span_id": sid}
        if s.get("tags"):
            attrs["tags"] = _kept(_obj(s["tags"], f"{what}: spans[{i}].tags"), f"{what}: spans[{i}].tags")
        if len(data) > ("thread.id" in data) + ("thread.name" in data) + ("profiler_id" in data):
            attrs["data"] = _kept({k: v for k, v in data.items() if k not in ("thread.id", "thread.name", "profiler_id")},
                                  f"{what}: spans[{i}].data")
        spans.append((sid, parent, name[:1000], op[:200] or "function", s0, s1, tid,
                      status if status not in (None, "ok") else None, attrs))
    prof = _obj(contexts.get("profile") or {}, f"{what}: contexts.profile")
    profiler_id = prof.get("profiler_id") or tdata.get("profiler_id")
    sdk = doc.get("sdk") if isinstance(doc.get("sdk"), dict) else {}
    for k, v in (("contexts.trace.trace_id", trace.get("trace_id")), ("contexts.trace.op", trace.get("op")),
                 ("platform", doc.get("platform")), ("environment", doc.get("environment")),
                 ("release", doc.get("release")), ("server_name", doc.get("server_name"))):
        _kept(v, f"{what}: {k}")  # (kept in the run's env as they are)
    meta = {"sentry.event_id": event_id, "sentry.trace_id": trace.get("trace_id"), "sentry.op": trace.get("op"),
            "sdk": f"{sdk.get('name', '?')} {sdk.get('version', '')}".strip(), "platform": doc.get("platform"),
            "environment": doc.get("environment"), "release": doc.get("release"),
            "server_name": doc.get("server_name"), **environment_facts(doc, contexts)}
    return TransactionRecord(
        event_id=event_id, name=(_str(doc.get("transaction"), f"{what}: transaction") or "<unnamed transaction>")[:1000],
        op=_str(trace.get("op"), f"{what}: contexts.trace.op", "") or "", status=_str(trace.get("status"), f"{what}: status"),
        start_ns=start, end_ns=end, span_id=_hexid(trace.get("span_id") or "0", f"{what}: contexts.trace.span_id"),
        thread_id=root_tid, spans=spans, profiler_id=_hexid(profiler_id, f"{what}: profiler_id") if profiler_id else None,
        thread_names=names, meta={k: v for k, v in meta.items() if v is not None})


def _fast_samples(samples_in: list, ns: int, times) -> list | None:
    """``(wall ns, thread id, stack index)`` of every sample when all of them are well-formed, checked a column at a
    time in C (``map``, ``min``/``max``: ~4x the per-sample loop's speed on the SDK's 100-sample profiles); None
    when any is not, and the per-sample loop then finds the first bad one and names it. ``times``: the samples ->
    their wall ns, or None."""
    if not samples_in:
        return []
    if set(map(type, samples_in)) != {dict}:
        return None
    ks = [s.get("stack_id") for s in samples_in]
    if set(map(type, ks)) != {int} or min(ks) < 0 or max(ks) >= ns:
        return None
    raw = [s.get("thread_id") for s in samples_in]
    if set(map(type, raw)) != {str}:
        return None
    try:
        conv = {v: thread_id(v, "") for v in set(raw)}
    except EnvelopeError:
        return None
    ts = times(samples_in)
    if ts is None:
        return None
    out = list(zip(ts, map(conv.__getitem__, raw), ks))
    out.sort(key=_first)
    return out


_first = itemgetter(0)  # (a sort key in C)


def _profile_body(prof: dict, what: str, sample_time, fast_times) -> tuple[list, list, list, dict]:
    frames_in = _list(prof.get("frames"), f"{what}: profile.frames")
    stacks_in = _list(prof.get("stacks"), f"{what}: profile.stacks")
    samples_in = _list(prof.get("samples"), f"{what}: profile.samples")
    frames = []
    for i, f in enumerate(frames_in):
        f = _obj(f, f"{what}: profile.frames[{i}]")
        line = f.get("lineno") or 0
        if not isinstance(line, int) or isinstance(line, bool):
            raise EnvelopeError(f"{what}: profile.frames[{i}].lineno: not an integer")
        frames.append((str(f.get("function") or "<unknown>")[:500], str(f.get("module") or "")[:500],
                       str(f.get("abs_path") or f.get("filename") or "")[:1000], max(0, min(line, 2**31))))
    nf = len(frames)
    sdk_frames = {i for i, f in enumerate(frames) if f[1] == "sentry_sdk" or f[1].startswith("sentry_sdk.")}
    flat = list(chain.from_iterable(stacks_in)) if set(map(type, stacks_in)) <= {list} else None
    if flat is None or (flat and not (set(map(type, flat)) == {int} and min(flat) >= 0 and max(flat) < nf)):
        # (all stacks are checked at once, in C; only when one is malformed, stack by stack to name it)
        for i, st in enumerate(stacks_in):
            if type(st) is not list:
                _list(st, f"{what}: profile.stacks[{i}]")
            if st and not (set(map(type, st)) == {int} and min(st) >= 0 and max(st) < nf):
                for j in st:
                    if not isinstance(j, int) or isinstance(j, bool) or not 0 <= j < nf:
                        raise EnvelopeError(f"{what}: profile.stacks[{i}]: frame index {j!r} is not in profile.frames")
    # the SDK's span wrappers hidden, as stepscope's are. Sentry: leaf first; stepscope: root first
    if not sdk_frames:
        stacks = list(map(tuple, map(reversed, stacks_in)))
    else:
        stacks = [tuple(reversed([j for j in st if j not in sdk_frames] or st)) for st in stacks_in]
    ns = len(stacks)
    samples = _fast_samples(samples_in, ns, fast_times)
    if samples is None:  # one is malformed (or of a rarer form): sample by sample, naming the first bad one
        samples = []
        tids = _Tids()
        for i, s in enumerate(samples_in):
            if type(s) is not dict:
                _obj(s, f"{what}: profile.samples[{i}]")
            k = s.get("stack_id")
            if type(k) is not int or not 0 <= k < ns:
                raise EnvelopeError(f"{what}: profile.samples[{i}].stack_id: {k!r} is not in profile.stacks")
            samples.append((sample_time(s, what, i), tids.get_id(s.get("thread_id"), what, ": profile.samples[",
                                                                 str(i), "].thread_id"), k))
        samples.sort(key=_first)
    meta = _obj(prof.get("thread_metadata") or {}, f"{what}: profile.thread_metadata")
    names = {}
    for k, v in meta.items():
        if isinstance(v, dict) and v.get("name") is not None:
            names[thread_id(k, f"{what}: profile.thread_metadata")] = str(v["name"])[:200]
    # the SDK's own threads (its sampler, transport, monitor) are the measurement, not the program:
    # hidden as stepscope hides its own sampler
    sdk = {tid for tid, nm in names.items() if nm.startswith(SDK_THREAD_PREFIXES)}
    if sdk:
        samples = [x for x in samples if x[1] not in sdk]
        names = {tid: nm for tid, nm in names.items() if tid not in sdk}
    return frames, stacks, samples, names


def profile_v1(doc: dict, what: str) -> ProfileRecord:
    """A ``profile`` item (sampled profile v1) -> ProfileRecord. Raises EnvelopeError."""
    version = str(doc.get("version", "1"))
    if version != "1":
        raise EnvelopeError(f"{what}: version {version!r}: a 'profile' item must be sampled profile v1")
    t0 = timestamp_ns(doc.get("timestamp"), f"{what}: timestamp")
    txs = _list(doc.get("transactions") or ([doc["transaction"]] if isinstance(doc.get("transaction"), dict) else []),
                f"{what}: transactions")
    tx_ids = [_hexid(_obj(t, f"{what}: transactions[{i}]").get("id"), f"{what}: transactions[{i}].id")
              for i, t in enumerate(txs)]
    if not tx_ids:
        raise EnvelopeError(f"{what}: no transaction to link the profile to (transactions is empty)")

    def when(s: dict, what: str, i: int) -> int:
        v = s.get("elapsed_since_start_ns")
        if type(v) is str and v.isdigit():
            v = int(v)
        if type(v) is not int or not 0 <= v < 2**50:
            raise EnvelopeError(f"{what}: profile.samples[{i}].elapsed_since_start_ns: not a non-negative integer")
        return t0 + v

    def times(samples: list) -> list | None:
        es = [s.get("elapsed_since_start_ns") for s in samples]
        kinds = set(map(type, es))
        if kinds == {str}:
            if not all(map(str.isdigit, es)):
                return None
            try:  # ASCII digits without leading zeros read as one JSON array (in C); int() for the rest
                ints = orjson.loads("".join(("[", ",".join(es), "]")))
                if len(ints) != len(es) or set(map(type, ints)) != {int}:
                    raise ValueError
            except (orjson.JSONDecodeError, ValueError):
                try:
                    ints = list(map(int, es))
                except ValueError:
                    return None
            es = ints
        elif kinds != {int}:
            return None
        if min(es) < 0 or max(es) >= 2**50:
            return None
        return list(map(t0.__add__, es))

    frames, stacks, samples, names = _profile_body(_obj(doc.get("profile"), f"{what}: profile"), what, when, times)
    return ProfileRecord("profile", tx_ids[0], None, frames, stacks, samples, names, tx_ids)


def profile_chunk(doc: dict, what: str) -> ProfileRecord:
    """A ``profile_chunk`` item (continuous profile v2) -> ProfileRecord. Raises EnvelopeError."""
    version = str(doc.get("version", "2"))
    if version != "2":
        raise EnvelopeError(f"{what}: version {version!r}: a 'profile_chunk' item must be profile v2")
    profiler_id = _hexid(doc.get("profiler_id"), f"{what}: profiler_id")
    chunk_id = _hexid(doc.get("chunk_id"), f"{what}: chunk_id")

    def when(s: dict, what: str, i: int) -> int:
        return _ts(s.get("timestamp"), what, ": profile.samples[", str(i), "].timestamp")

    def times(samples: list) -> list | None:
        ts = [s.get("timestamp") for s in samples]
        if set(map(type, ts)) != {float} or min(ts) < _MIN_S or not max(ts) < _MAX_S:
            return None
        return [round(v * 1e9) for v in ts]

    frames, stacks, samples, names = _profile_body(_obj(doc.get("profile"), f"{what}: profile"), what, when, times)
    return ProfileRecord("profile_chunk", chunk_id, profiler_id, frames, stacks, samples, names)


def _spans(doc: dict, what: str) -> list:
    from .spanstream import spans_v2

    return spans_v2(doc, what)


HANDLED = {"transaction": transaction, "profile": profile_v1, "profile_chunk": profile_chunk, "span": _spans}


def batch(env: Envelope) -> Batch:
    """Validate and convert every item of an envelope. Raises EnvelopeError on the first malformed one."""
    txs, profiles, chunks, traces = [], [], [], []
    counts: dict[str, int] = {}
    ignored: dict[str, int] = {}
    for i, item in enumerate(env.items):
        t = item.type
        counts[t] = counts.get(t, 0) + 1
        conv = HANDLED.get(t)
        if conv is None:
            ignored[t] = ignored.get(t, 0) + 1
            continue
        what = f"item {i + 1} ({t})"
        try:
            rec = conv(item.json(what), what)
        except RecursionError:  # (str() of a value ~1,000 levels deep: a thread or frame name)
            raise EnvelopeError(f"{what}: {TOO_DEEP}") from None
        if t == "span":
            traces.extend(rec)
        else:
            (txs if t == "transaction" else profiles if t == "profile" else chunks).append(rec)
    eid = env.headers.get("event_id")
    return Batch(txs, profiles, chunks, counts, ignored, eid if isinstance(eid, str) else None, traces)
