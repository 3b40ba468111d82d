"""Kineto / Chrome trace JSON (``.json``, ``.json.gz``) parsed into columnar arrays.

Format: the torch profiler's Chrome trace export (Kineto): ``{"traceEvents": [...], "deviceProperties":
[...], "baseTimeNanoseconds"?: int, ...}``. Complete events (``ph: "X"``) carry ``ts``/``dur`` in
microseconds (floats; "ns resolution" traces keep microseconds with a fractional part), a category
(``cat``: cpu_op, user_annotation, python_function, cuda_runtime, cuda_driver, kernel, gpu_memcpy,
gpu_memset, cuda_sync, gpu_user_annotation, ...) and ``args`` (``correlation`` links a runtime call to
its device activity, ``stream``/``device`` place device activity, ``External id`` links ops). Other
phases (metadata, flows, instants) are skipped. Traces with no rank or distributed info load too.

Times here are int64 **ns**. With ``baseTimeNanoseconds``, event times are offsets from it; without,
they are Unix-epoch microseconds. ``epoch_ns(i)`` gives wall time either way, so a trace is rebased
onto a run's clock with its anchor (``clock.Anchor.to_mono_ns``).

Reading a file (``load``) decodes straight into the columns: msgspec decodes the events into typed structs that
keep only the fields used (every other field and ``args`` key is skipped without being built; the structs are
never tracked by the garbage collector, which halves the decode) and the complete ones become columns. Up to
``SINGLE_PASS_BYTES`` of events this is one pass; beyond it msgspec first splits the document into raw event
slices (no copy) and decodes ``CHUNK`` events at a time, each chunk turned into column pieces before the next.
No dict per event is ever made: memory is the file's bytes, the structs of one pass or chunk, and the columns.
Of ``args``, the ids above become columns and ``Input Dims``/``Concrete Inputs``/``Input type`` are kept for the ops
whose FLOPs are counted (``flops.FLOP_OPS``); ``args[i]`` rebuilds a dict of them on demand.
"""

from __future__ import annotations

import itertools
import re
import typing
from collections import defaultdict
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import msgspec
import numpy as np
import orjson

from ..core.jsondepth import KEPT_DEPTH, TOO_DEEP, within
from .rawread import TraceError, gunzip, read  # noqa: F401 (kineto's names: read, gunzip and TraceError live there)

CATEGORIES = ("other", "cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver", "kernel",
              "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
CAT = {c: i for i, c in enumerate(CATEGORIES)}
#: Device activity that occupies a stream.
DEVICE_CATS = (CAT["kernel"], CAT["gpu_memcpy"], CAT["gpu_memset"])


def _distributed(doc: dict) -> dict:
    """A trace's ``distributedInfo`` as flat scalars (``backend``, ``rank``, ``world_size``...), or {}."""
    info = doc.get("distributedInfo")
    if not isinstance(info, dict):
        return {}
    return {str(k): v for k, v in info.items() if isinstance(v, (str, int, float, bool)) or v is None}


@dataclass
class KinetoTrace:
    """Columns over the complete events of a trace, in file order.

    ``cat`` (int8 codes of ``CATEGORIES``), ``name`` (int32 index into ``names``), ``ts``/``dur``/``end``
    (int64 ns), ``pid``/``tid`` (int64; string ids are hashed to negative numbers), ``correlation``,
    ``external_id``, ``stream``, ``device`` (int64, -1 when absent), ``nbytes`` (int64 bytes of a memcpy,
    -1 otherwise). ``args[i]``: event ``i``'s ``args`` as a dict (all of it for ``from_events``; for ``load``, the
    ids above and the input shapes of FLOP-counted ops, rebuilt on demand).
    """

    path: str
    names: list[str]
    cat: np.ndarray
    name: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    nbytes: np.ndarray
    args: "list[dict] | LazyArgs"
    base_ns: int = 0
    device_properties: list[dict] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    #: the trace's ``distributedInfo`` (``backend``, ``rank``, ``world_size``: a torch.distributed rank's trace), or {}
    distributed: dict = field(default_factory=dict)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def __len__(self) -> int:
        return len(self.ts)

    def name_of(self, i: int) -> str:
        return self.names[int(self.name[i])]

    def epoch_ns(self, t_ns: int) -> int:
        """Unix-epoch ns of a trace time (ns)."""
        return int(t_ns) + self.base_ns

    def mask(self, *cats: str) -> np.ndarray:
        """Boolean mask of events in the given categories."""
        return np.isin(self.cat, [CAT[c] for c in cats])

    @property
    def device_name(self) -> str | None:
        name = self.device_properties[0].get("name") if self.device_properties else None
        return name if isinstance(name, str) else None


def _properties(props) -> list[dict]:
    """``deviceProperties``: the objects in it, each kept only ``within`` ``KEPT_DEPTH`` (``nesting``)."""
    return [d for d in props if type(d) is dict and within(d)] if isinstance(props, list) else []


def _id(v) -> int:
    """An id as int64: an integer as it is (one past int64's range: as a string is), a float truncated, a string
    hashed to a negative number below -1, None / a list / an object -1."""
    if isinstance(v, int):
        return v if -(1 << 63) <= v < (1 << 63) else -(abs(hash(v)) % (1 << 40)) - 2
    if isinstance(v, float):
        return int(v)
    if v is None or isinstance(v, (list, dict)):  # (a list or object is no id)
        return -1
    return -(abs(hash(v)) % (1 << 40)) - 2


def load(path: str | Path, raw: bytes | None = None) -> KinetoTrace:
    """Parse a Kineto trace file (``.json`` or gzipped) into columns (see the module doc); ``raw``: its bytes as
    ``read`` gave them, when already read. Raises TraceError (one line naming the file) for unreadable input."""
    p = Path(path)
    if raw is None:
        raw = read(p)
    try:
        return _load_typed(raw, str(p))
    except (msgspec.ValidationError, _Untyped):
        pass  # a document of another shape: the general reader below says what is wrong, or reads it
    except RecursionError:  # nested deeper than msgspec's decoder goes (Python's recursion limit, less the stack
        pass                # in use): orjson's own limit (1,024 levels) refuses it naming the place, or reads it
    except (msgspec.DecodeError, UnicodeDecodeError) as e:  # (msgspec: invalid UTF-8 in a string it decodes)
        raise TraceError(f"{p}: not JSON ({e})") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise TraceError(f"{p}: not JSON ({e})") from None
    del raw
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{p}: no traceEvents list (not a Chrome/Kineto trace)")
    try:
        return from_events(doc["traceEvents"], str(p), doc)
    except RecursionError:  # (a value too deep for Python that the bounds of ``from_events`` missed)
        raise TraceError(f"{p}: {TOO_DEEP}") from None


#: Events decoded into structs at a time by ``load`` when the events' JSON is over ``SINGLE_PASS_BYTES``.
CHUNK = 65_536
#: Up to this much JSON of events (~700k events) is decoded in one pass (faster: no slicing into raw events);
#: beyond it, CHUNK at a time (memory: the structs of one chunk, not of the whole trace).
SINGLE_PASS_BYTES = 128 << 20

_Num = int | float | None
_Id = int | float | str | None


_NO_RAW = msgspec.Raw()


class _Args(msgspec.Struct, gc=False):  # no cycles: never tracked by the GC (a 2x faster decode)
    correlation: _Id = -1
    external_id: _Id = msgspec.field(default=-1, name="External id")
    stream: _Id = -1
    device: _Id = -1
    nbytes: _Id = msgspec.field(default=-1, name="bytes")
    # raw JSON, empty when absent (``Raw | None`` would accept only null: every trace with shapes fell back to the
    # slow general reader)
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    concrete: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")


class _Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event: the only phase whose fields are decoded."""

    name: str | int | float | None = ""
    cat: str | None = ""
    ts: _Num = None
    dur: int | float = 0
    pid: _Id = -1
    tid: _Id = -1
    args: _Args = msgspec.field(default_factory=_Args)


#: Every other phase of the Trace Event Format (Chrome's "Trace Event Format" document: duration, instant, counter,
#: async, flow, sample, object, metadata, memory dump, mark, clock sync, context events): decoded as an empty
#: struct, all its fields skipped. A phase not listed here sends the file to the general reader.
_OTHER = tuple(msgspec.defstruct(f"_Ph{i}", [], gc=False, tag_field="ph", tag=t)
               for i, t in enumerate(("B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P",
                                      "O", "N", "D", "M", "V", "v", "R", "c", "(", ")")))


_NAME, _CATF, _TS, _DUR, _PID, _TID, _ARGS = (attrgetter(f) for f in ("name", "cat", "ts", "dur", "pid", "tid", "args"))
_CORR, _EXT, _STREAM, _DEV, _BYTES = (attrgetter(f) for f in ("correlation", "external_id", "stream", "device", "nbytes"))


class _Untyped(Exception):
    """The fast path does not apply (events that are not objects of the usual shape)."""


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_LEADING_WS = re.compile(rb"[ \t\n\r]*")
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[typing.Union[(_Event, *_OTHER)]])


class LazyArgs:
    """``args[i]`` of a loaded trace as a dict, rebuilt from the id columns and the kept input shapes."""

    __slots__ = ("_trace", "_extra")

    def __init__(self, trace: "KinetoTrace", extra: dict[int, dict]) -> None:
        self._trace = trace
        self._extra = extra

    def __len__(self) -> int:
        return len(self._trace)

    def __getitem__(self, i: int) -> dict:
        tr = self._trace
        d = {}
        for key, col in (("correlation", tr.correlation), ("External id", tr.external_id), ("stream", tr.stream),
                         ("device", tr.device), ("bytes", tr.nbytes)):
            v = int(col[i])
            if v != -1:
                d[key] = v
        extra = self._extra.get(int(i))
        if extra:
            d.update(extra)
        return d

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _load_typed(raw: bytes, path: str) -> KinetoTrace:
    """The fast reader of ``load``. Raises msgspec errors or _Untyped where the general reader must decide."""
    from .flops import FLOP_OPS

    scanned = _load_scanned(raw, path)
    if scanned is not None:
        return scanned
    doc: dict = {}
    if raw[_LEADING_WS.match(raw).end():][:1] == b"[":  # (no copy of the whole document to look at it)
        events_raw = raw
    else:
        parts = _TOP.decode(raw)
        if "traceEvents" not in parts:
            raise _Untyped
        events_raw = parts.pop("traceEvents")
        for k, v in parts.items():  # small: metadata, deviceProperties
            doc[k] = msgspec.json.decode(v)
    if len(events_raw) <= SINGLE_PASS_BYTES:  # one typed decode (structs never tracked by the GC)
        try:
            chunks = iter([_EVENTS.decode(events_raw)])
        except msgspec.ValidationError:
            raise _Untyped from None
        cap = len(events_raw) // 40  # no complete event is shorter than 40 bytes
    else:  # bounded memory: raw slices of CHUNK events decoded at a time
        top = _RAWS.decode(events_raw)
        cap = len(top)
        chunks = _chunks(top)
    del events_raw
    flop_names = set(FLOP_OPS)
    names: defaultdict = defaultdict(itertools.count().__next__)  # name -> index, made in C as names come
    col = None
    flop_ids: list[int] = []  # name indices of ops whose FLOPs are counted
    looked = 0  # how many names were checked for it
    extra: dict[int, dict] = {}
    n = 0
    is_x = _Event.__instancecheck__
    for events in chunks:
        xs = list(itertools.compress(events, map(is_x, events)))  # every step in C: no bytecode per event
        del events
        m = len(xs)
        if not m:
            continue
        if col is None:  # columns filled in place, never concatenated (cap: an upper bound of the complete events)
            cap = max(cap, m)
            col = {k: np.empty(cap, dtype=np.int8 if k == "cat" else np.int32 if k == "name" else np.int64)
                   for k in ("cat", "name", "ts", "dur", "pid", "tid", "corr", "ext", "stream", "dev", "bytes")}
        if n + m > cap:  # only if the byte bound was wrong: grow (never in practice)
            cap = 2 * (n + m)
            col = {k: np.concatenate([v[:n], np.empty(cap - n, v.dtype)]) for k, v in col.items()}
        sl = slice(n, n + m)
        try:
            us = np.fromiter(map(_TS, xs), np.float64, m)
        except TypeError:
            raise _Untyped from None
        if np.isnan(us).any():  # a complete event without ts (None reads as NaN): the general reader names it
            raise _Untyped
        col["ts"][sl] = np.rint(us * 1000)
        col["cat"][sl] = np.fromiter(map(CAT.get, map(_CATF, xs), itertools.repeat(0)), np.int8, m)
        col["name"][sl] = np.fromiter(map(names.__getitem__, map(_NAME, xs)), np.int32, m)
        col["dur"][sl] = np.rint(np.fromiter(map(_DUR, xs), np.float64, m) * 1000)
        col["pid"][sl] = _few_ids(_PID, xs, m)
        col["tid"][sl] = _few_ids(_TID, xs, m)
        args = list(map(_ARGS, xs))
        col["corr"][sl] = _int_ids(_CORR, args, m)
        col["ext"][sl] = _int_ids(_EXT, args, m)
        col["stream"][sl] = _int_ids(_STREAM, args, m)
        col["dev"][sl] = _int_ids(_DEV, args, m)
        col["bytes"][sl] = _int_ids(_BYTES, args, m)
        if len(names) > looked:  # names first seen in this chunk: do they count FLOPs?
            flop_ids += [i for i, x in enumerate(itertools.islice(names, looked, None), looked) if str(x) in flop_names]
            looked = len(names)
        hits = np.nonzero(np.isin(col["name"][sl], flop_ids))[0] if flop_ids else np.empty(0, np.int64)
        for j in hits.tolist():
            a = args[j]
            if a.input_dims or a.concrete or a.input_type:
                e = {}
                for key, raw in (("Input Dims", a.input_dims), ("Concrete Inputs", a.concrete),
                                 ("Input type", a.input_type)):
                    if raw:
                        v = msgspec.json.decode(raw)
                        if within(v, KEPT_DEPTH - 1):  # (as in ``from_events``: args is one level)
                            e[key] = v
                extra[n + j] = e
        n += m
    if col is None:
        col = {k: np.empty(0, dtype=np.int8 if k == "cat" else np.int32 if k == "name" else np.int64)
               for k in ("cat", "name", "ts", "dur", "pid", "tid", "corr", "ext", "stream", "dev", "bytes")}
        cap = 0
    del chunks
    col = {k: v[:n].copy() if n < cap else v for k, v in col.items()}
    return _trace(col, list(names), extra, doc, path)


def _trace(col: dict, names: list, extra: dict, doc: dict, path: str) -> KinetoTrace:
    """The KinetoTrace of the readers' columns (``col``: cat name ts dur pid tid corr ext stream dev bytes), the
    names as decoded (strings, or numbers and null, which become their text), the kept input shapes and the
    document's other keys."""
    base = doc.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) else 0
    meta = {k: v for k, v in doc.items() if k not in ("traceEvents", "deviceProperties") and not isinstance(v, (list, dict))}
    props = doc.get("deviceProperties")
    if any(type(x) is not str for x in names):  # a number or null as a name: the same text is one name
        text = {}
        remap = np.fromiter((text.setdefault(str(x), len(text)) for x in names), np.int32, len(names))
        col["name"] = remap[col["name"]]
        names = list(text)
    dur = np.maximum(col["dur"], 0, out=col["dur"])  # (in place: the readers' own column)
    trace = KinetoTrace(
        path=path, names=names, cat=col["cat"], name=col["name"], ts=col["ts"], dur=dur,
        pid=col["pid"], tid=col["tid"], correlation=col["corr"], external_id=col["ext"], stream=col["stream"],
        device=col["dev"], nbytes=col["bytes"], args=[], base_ns=base_ns,
        device_properties=_properties(props), metadata=meta, distributed=_distributed(doc))
    trace.args = LazyArgs(trace, extra)
    return trace


#: the args kept raw, in the order ``_load_typed`` builds their dict (``device/native/kscan.c``'s key numbers)
_RAW_KEYS = ("Input Dims", "Concrete Inputs", "Input type")


def _load_scanned(raw: bytes, path: str) -> KinetoTrace | None:
    """``_load_typed``'s result from the C scanner (``device.native``: ``kscan.c`` reads the document in one pass,
    the events array into columns and the distinct raw tokens of name, cat, pid and tid, the other top-level members
    as raw JSON; each distinct token and member is decoded here, by msgspec, and the tokens numbered by their value as
    the msgspec reader numbers them), or None when the scanner is not built, turned off (``STEPSCOPE_KSCAN=0``) or
    leaves the document to the msgspec reader."""
    from .flops import FLOP_OPS
    from .native import scan

    if scan is None:
        return None
    got = scan(raw)
    if got is None:
        return None
    n, (cat_b, name_b, pid_b, tid_b, *i64_b, raws_b), (name_t, cat_t, pid_t, tid_t), top = got
    dec = msgspec.json.decode
    doc = {dec(k): dec(v) for k, v in top}  # (small: metadata, deviceProperties)

    def by_value(tokens: list) -> tuple[np.ndarray, list]:  # token index -> index of its value (first seen), values
        keyed: dict = {}
        remap = np.fromiter((keyed.setdefault(dec(t), len(keyed)) for t in tokens), np.int32, len(tokens))
        return remap, list(keyed)

    nremap, names = by_value(name_t)
    col = {"name": nremap[np.frombuffer(name_b, np.int32)]}
    cats = np.array([CAT.get(dec(t), 0) for t in cat_t] + [0], np.int8)  # (-1: no cat, "" by default: 0)
    col["cat"] = cats[np.frombuffer(cat_b, np.int32)]
    del got, cat_b, name_b
    for key, toks in (("pid", pid_t), ("tid", tid_t)):
        remap, values = by_value(toks)
        ids = [_id(v) for v in values]
        lut = np.array([ids[r] for r in remap.tolist()] + [-1], np.int64)  # token -> id; [-1]: absent, -1 by default
        col[key] = lut[np.frombuffer(pid_b if key == "pid" else tid_b, np.int32)]  # (one gather, no temporaries)
    del pid_b, tid_b
    for key, buf in zip(("ts", "dur", "corr", "ext", "stream", "dev", "bytes"), i64_b):
        col[key] = np.frombuffer(buf, np.int64)  # (the scanner's own buffer: no copy)
    extra: dict[int, dict] = {}
    raws = np.frombuffer(raws_b, np.int64).reshape(-1, 4)
    flop_names = set(FLOP_OPS)
    flop_ids = [i for i, x in enumerate(names) if str(x) in flop_names]
    if len(raws) and flop_ids:
        view = memoryview(raw)
        raws = raws[np.isin(col["name"][raws[:, 0]], flop_ids)]
        for j, k, a, b in sorted(map(tuple, raws.tolist())):  # (by event, then key: the msgspec reader's order)
            e = extra.setdefault(j, {})
            v = dec(view[a:b])
            if within(v, KEPT_DEPTH - 1):  # (as in ``from_events``: args is one level)
                e[_RAW_KEYS[k]] = v
    return _trace(col, names, extra, doc, path)


def _chunks(top: list):
    """Typed events of ``top`` (raw event slices), ``CHUNK`` at a time; each slice is let go once decoded."""
    for lo in range(0, len(top), CHUNK):
        k = min(CHUNK, len(top) - lo)
        part = b",".join(map(bytes, top[lo:lo + k]))
        top[lo:lo + k] = itertools.repeat(None, k)
        try:
            events = _EVENTS.decode(b"[" + part + b"]")
        except msgspec.ValidationError:
            raise _Untyped from None
        del part
        yield events


def _few_ids(get, xs: list, m: int) -> np.ndarray:
    """``get`` of each of the ``m`` events ``xs`` as int64 ids, for a field with few distinct values (pid, tid):
    each value is numbered in C as it comes (a dict), and only the distinct ones are converted (``_id``: Kineto
    names pseudo-processes and threads with strings). Unhashable ids (lists): ``_ints``."""
    seen: defaultdict = defaultdict(itertools.count().__next__)
    try:
        where = np.fromiter(map(seen.__getitem__, map(get, xs)), np.int32, m)
    except TypeError:
        return _ints(map(get, xs), m)
    return np.fromiter(map(_id, seen), np.int64, len(seen))[where]


def _int_ids(get, xs: list, m: int) -> np.ndarray:
    """``get`` of each of the ``m`` items ``xs`` as int64, in one pass in C where all are integers (no list made);
    else as ``_ints`` converts them."""
    try:
        return np.fromiter(map(get, xs), np.int64, m)
    except (TypeError, ValueError, OverflowError):
        return _ints(map(get, xs), m)


def _ints(values, m: int) -> np.ndarray:
    """``m`` ids as int64, converted in C where they are numbers; strings and None as ``_int_col`` maps them."""
    values = list(values)
    try:
        return np.fromiter(values, np.int64, m)
    except (TypeError, ValueError, OverflowError):
        pass
    # a few ids of another type (Kineto names a pseudo-process "Spans"): found in C, mapped one by one
    odd = np.nonzero(~np.fromiter(map(isinstance, values, itertools.repeat(int)), bool, m))[0]
    for j in odd.tolist():
        values[j] = _id(values[j])
    try:
        return np.fromiter(values, np.int64, m)
    except OverflowError:
        return _int_col(values)


def _int_col(values: list) -> np.ndarray:
    """int64 column; non-integer ids (strings, None, lists) are mapped by ``_id``."""
    try:
        col = np.asarray(values, dtype=np.int64)
        if col.ndim == 1:  # (ids that are lists of one length make a 2-D array)
            return col
    except (TypeError, ValueError, OverflowError):
        pass
    return np.fromiter(map(_id, values), dtype=np.int64, count=len(values))


def _name_text(v, path: str) -> str:
    """A name that is not a string as text; TraceError for a list/object nested past ``KEPT_DEPTH`` (``str`` would
    recurse into it)."""
    if not within(v):
        raise TraceError(f"{path}: a complete event's name is nested more than {KEPT_DEPTH} levels deep")
    return str(v)


def from_events(events: list, path: str = "<events>", doc: dict | None = None) -> KinetoTrace:
    """Columns from a list of Chrome trace events (see ``load``)."""
    doc = doc or {}
    xs = [e for e in events if type(e) is dict and e.get("ph") == "X"]
    try:
        ts = np.rint(np.asarray([e["ts"] for e in xs], dtype=np.float64) * 1000).astype(np.int64)
        dur = np.rint(np.asarray([e.get("dur", 0) for e in xs], dtype=np.float64) * 1000).astype(np.int64)
    except (KeyError, TypeError, ValueError):
        bad = next(i for i, e in enumerate(events) if type(e) is dict and e.get("ph") == "X"
                   and not isinstance(e.get("ts"), (int, float)) or isinstance(e, dict) and e.get("ph") == "X"
                   and not isinstance(e.get("dur", 0), (int, float)))
        raise TraceError(f"{path}: traceEvents[{bad}]: complete event without a numeric ts/dur") from None
    raw_names = [e.get("name", "") for e in xs]
    raw_names = [n if type(n) is str else _name_text(n, path) for n in raw_names]
    names = list(dict.fromkeys(raw_names))
    name_idx = {n: i for i, n in enumerate(names)}
    args_out = [e.get("args") if type(e.get("args")) is dict else {} for e in xs]
    for i in [i for i, a in enumerate(args_out) if not within(a)]:  # values nested past KEPT_DEPTH: dropped
        args_out[i] = {k: v for k, v in args_out[i].items() if within(v, KEPT_DEPTH - 1)}
    cat_get = CAT.get
    cols = {
        "cat": np.asarray([cat_get(c, 0) if type(c := e.get("cat", "")) is str else 0 for e in xs], dtype=np.int8),
        "name": np.asarray([name_idx[n] for n in raw_names], dtype=np.int32),
        "pid": _int_col([e.get("pid", -1) for e in xs]),
        "tid": _int_col([e.get("tid", -1) for e in xs]),
        "corr": _int_col([a.get("correlation", -1) for a in args_out]),
        "ext": _int_col([a.get("External id", -1) for a in args_out]),
        "stream": _int_col([a.get("stream", -1) for a in args_out]),
        "dev": _int_col([a.get("device", -1) for a in args_out]),
        "bytes": _int_col([a.get("bytes", -1) for a in args_out]),
    }
    base = doc.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) else 0
    meta = {k: v for k, v in doc.items() if k not in ("traceEvents", "deviceProperties") and not isinstance(v, (list, dict))}
    return KinetoTrace(
        path=path, names=names, cat=cols["cat"], name=cols["name"], ts=ts, dur=np.maximum(dur, 0), pid=cols["pid"],
        tid=cols["tid"], correlation=cols["corr"], external_id=cols["ext"], stream=cols["stream"], device=cols["dev"],
        nbytes=cols["bytes"], args=args_out,
        base_ns=base_ns, device_properties=_properties(doc.get("deviceProperties")), metadata=meta,
        distributed=_distributed(doc))
