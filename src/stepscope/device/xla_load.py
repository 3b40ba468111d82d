"""Reading a PyTorch/XLA profiler capture into columns (``XlaTrace``); the analysis is ``device.xla``.

Format: the trace-viewer JSON that the XLA profiler (``torch_xla.debug.profiler.start_trace``/
``stop_trace``, or the profiler server with ``xp.trace``/TensorBoard's capture) writes as
``plugins/profile/<time>/<host>.trace.json.gz``: ``{"displayTimeUnit": "ns", "metadata": {...},
"traceEvents": [...]}``; complete events (``ph: "X"``) with ``ts``/``dur`` in microseconds (floats, ns
resolution) from the session's start, ``pid``/``tid`` (a process per host or device: ``/host:CPU``,
``/device:TPU:0``; its threads named by ``M`` events), and ``args``. Times here are int64 **ns**.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from ..core.jsondepth import KEPT_DEPTH, TOO_DEEP, within
from .kineto import TraceError

#: Names that mark a trace as PyTorch/XLA's.
SIGNATURE = ("XLAGraphExecutor::Compile", "PjRtComputationClient::ExecuteComputation", "StepMarker",
             "SyncTensorsGraphInternal", "PjRtComputationClient::TransferFromDevice",
             "IfrtComputationClient::ExecuteReplicated")


@dataclass
class XlaTrace:
    """Columns over the complete events of one or more host files of a capture, in file order.

    ``name`` (int32 index into ``names``), ``ts``/``dur`` (int64 ns from the session's start), ``pid``,
    ``tid`` (int64), ``args`` (each event's dict); ``processes`` pid -> name, ``threads`` (pid, tid) -> name;
    ``files``: the files read."""

    path: str
    files: list[str]
    names: list[str]
    name: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    args: list[dict]
    processes: dict[int, str] = field(default_factory=dict)
    threads: dict[tuple[int, int], str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts)

    def name_of(self, i: int) -> str:
        return self.names[int(self.name[i])]

    def where(self, pred) -> np.ndarray:
        """Indices of events whose name satisfies ``pred(name)``, in time order."""
        ok = np.array([bool(pred(n)) for n in self.names], bool)
        idx = np.nonzero(ok[self.name])[0] if len(self.names) else np.zeros(0, np.int64)
        return idx[np.argsort(self.ts[idx], kind="stable")]


def trace_files(path: str | os.PathLike) -> list[Path]:
    """The ``*.trace.json.gz`` (or ``.trace.json``) files of a capture: the file itself, or in a folder
    (``plugins/profile/<time>/``, or any folder above it) the newest ``<time>`` folder's files, one per
    host. Raises TraceError naming the folder when it holds none."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise TraceError(f"{p}: no such file or folder")
    found = sorted(f for pat in ("*.trace.json.gz", "*.trace.json") for f in p.rglob(pat) if f.is_file())
    if not found:
        raise TraceError(f"{p}: no <host>.trace.json.gz (the XLA profiler writes "
                         "plugins/profile/<time>/<host>.trace.json.gz; an .xplane.pb alone cannot be read)")
    newest = max(f.parent for f in found)
    return [f for f in found if f.parent == newest]


def looks_xla(path: str | os.PathLike, raw: bytes | None = None) -> bool:
    """Whether a trace file is PyTorch/XLA's, from its bytes (no JSON parsing; ``raw``: the file's JSON bytes
    when already read); False if unreadable."""
    if raw is None:
        try:
            raw = Path(path).read_bytes()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
        except (OSError, EOFError, gzip.BadGzipFile):
            return False
    return any(f'"{n}"'.encode() in raw for n in SIGNATURE)


def _read(path: Path) -> dict:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = orjson.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise TraceError(f"{path}: cannot read ({e})") from None
    except orjson.JSONDecodeError as e:
        raise TraceError(f"{path}: not JSON ({e})") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{path}: no traceEvents list (not a trace-viewer trace)")
    return doc


def is_xla(doc_or_events) -> bool:
    """Whether a trace document (or its events) is PyTorch/XLA's (any of ``SIGNATURE`` among its names)."""
    events = doc_or_events.get("traceEvents", []) if isinstance(doc_or_events, dict) else doc_or_events
    sig = set(SIGNATURE)
    return any(type(e) is dict and e.get("name") in sig for e in events)


def load_xla(path: str | os.PathLike, require_xla: bool = True) -> XlaTrace:
    """Read a capture (a trace file or a folder, see ``trace_files``). Raises TraceError (one line naming
    the file) for unreadable input or (``require_xla``) a trace with none of PyTorch/XLA's events."""
    try:
        return _load_xla(path, require_xla)
    except RecursionError:  # (a value too deep for Python that the checks below missed)
        raise TraceError(f"{path}: {TOO_DEEP}") from None


def _load_xla(path: str | os.PathLike, require_xla: bool) -> XlaTrace:
    files = trace_files(path)
    names: dict[str, int] = {}
    cols: dict[str, list] = {k: [] for k in ("name", "ts", "dur", "pid", "tid")}
    args: list[dict] = []
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    any_xla = False
    for h, f in enumerate(files):
        doc = _read(f)
        events = doc["traceEvents"]
        any_xla = any_xla or is_xla(events)
        shift = h << 32  # hosts' pids apart
        for k, e in enumerate(events):
            if type(e) is not dict:
                continue
            ph = e.get("ph")
            if ph == "M":
                a = e.get("args") if isinstance(e.get("args"), dict) else {}
                if e.get("name") == "process_name":
                    processes[_int(e.get("pid")) + shift] = _text(a.get("name", ""), f, k)
                elif e.get("name") == "thread_name":
                    threads[(_int(e.get("pid")) + shift, _int(e.get("tid")))] = _text(a.get("name", ""), f, k)
                continue
            if ph != "X":
                continue
            ts, dur = e.get("ts"), e.get("dur", 0)
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                raise TraceError(f"{f}: traceEvents[{k}]: complete event without a numeric ts/dur")
            n = e.get("name", "")
            n = n if type(n) is str else _text(n, f, k)
            cols["name"].append(names.setdefault(n, len(names)))
            cols["ts"].append(ts)
            cols["dur"].append(dur)
            cols["pid"].append(_int(e.get("pid")) + shift)
            cols["tid"].append(_int(e.get("tid")))
            args.append(e.get("args") if type(e.get("args")) is dict else {})
    if require_xla and not any_xla:
        raise TraceError(f"{files[0]}: not a PyTorch/XLA trace (none of {', '.join(SIGNATURE[:3])} in it)")
    return XlaTrace(
        path=str(path), files=[str(f) for f in files], names=list(names),
        name=np.asarray(cols["name"], np.int32),
        ts=np.rint(np.asarray(cols["ts"], np.float64) * 1000).astype(np.int64),
        dur=np.maximum(np.rint(np.asarray(cols["dur"], np.float64) * 1000).astype(np.int64), 0),
        pid=np.asarray(cols["pid"], np.int64), tid=np.asarray(cols["tid"], np.int64), args=args,
        processes=processes, threads=threads)


def _text(v, f: Path, k: int) -> str:
    """A name that is not a string as text; TraceError naming event ``k`` of ``f`` for a list/object nested past
    ``jsondepth.KEPT_DEPTH`` (``str`` would recurse into it)."""
    if not within(v):
        raise TraceError(f"{f}: traceEvents[{k}]: a name nested more than {KEPT_DEPTH} levels deep")
    return str(v)


def _int(v) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return int(v)
    if isinstance(v, (list, dict)):  # (a list or object is no id)
        return -1
    try:
        return int(v)
    except (TypeError, ValueError):
        return -(abs(hash(v)) % (1 << 31)) - 2
