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
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

CATEGORIES = ("other", "cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver", "kernel",
              "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
CAT = {c: i for i, c in enumerate(CATEGORIES)}
#: Device activity that occupies a stream.
DEVICE_CATS = (CAT["kernel"], CAT["gpu_memcpy"], CAT["gpu_memset"])


class TraceError(ValueError):
    """A file that is not a readable Kineto/Chrome trace (the message names the file and what is wrong)."""


@dataclass
class KinetoTrace:
    """Columns over the complete events of a trace, in file order.

    ``cat`` (int8 codes of ``CATEGORIES``), ``name`` (int32 index into ``names``), ``ts``/``dur``/``end``
    (int64 ns), ``pid``/``tid`` (int64; string ids are hashed to negative numbers), ``correlation``,
    ``external_id``, ``stream``, ``device`` (int64, -1 when absent), ``nbytes`` (int64 bytes of a memcpy,
    -1 otherwise). ``args`` keeps each event's ``args`` dict for the few analyses that need more.
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
    args: list[dict]
    base_ns: int = 0
    device_properties: list[dict] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)

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
        return self.device_properties[0].get("name") if self.device_properties else None


def _id(v) -> int:
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    if v is None:
        return -1
    return -(abs(hash(v)) % (1 << 40)) - 2


def load(path: str | Path) -> KinetoTrace:
    """Parse a Kineto trace file. Raises TraceError (one line naming the file) for unreadable input."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = orjson.loads(raw)
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise TraceError(f"{p}: cannot read ({e})") from None
    except orjson.JSONDecodeError as e:
        raise TraceError(f"{p}: not JSON ({e})") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{p}: no traceEvents list (not a Chrome/Kineto trace)")
    return from_events(doc["traceEvents"], str(p), doc)


def _int_col(values: list) -> np.ndarray:
    """int64 column; non-integer ids (strings, None) are mapped by ``_id``."""
    try:
        return np.asarray(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.asarray([_id(v) for v in values], dtype=np.int64)


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
    raw_names = [n if type(n) is str else str(n) for n in raw_names]
    names = list(dict.fromkeys(raw_names))
    name_idx = {n: i for i, n in enumerate(names)}
    args_out = [e.get("args") if type(e.get("args")) is dict else {} for e in xs]
    cat_get = CAT.get
    cols = {
        "cat": np.asarray([cat_get(e.get("cat", ""), 0) for e in xs], dtype=np.int8),
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
        base_ns=base_ns, device_properties=list(doc.get("deviceProperties") or []), metadata=meta)
