"""A run joined with its XLA trace: the run's spans rebased onto the trace clock through stepscope's clock
markers (``record.device.xla_capture``), its sync sites and torch_xla metrics readings, then ``device.xla.analyze``."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..core.jsondepth import small_json
from ..record.device.capture import MARKER
from .kineto import TraceError
from .xla import HostSpan, XlaSummary, analyze
from .xla_load import XlaTrace, load_xla


def clock_points(tr: XlaTrace) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """From the ``stepscope.clock_sync <label>@<OS tid> <perf_counter_ns>`` markers: (clock reading,
    offset) pairs and trace tid -> OS thread id."""
    pts, tids = [], {}
    for i in tr.where(lambda n: n.startswith(MARKER + " ")).tolist():
        parts = tr.name_of(i).split(" ")
        if len(parts) != 3:
            continue
        label, _, native = parts[1].partition("@")
        try:
            mono = int(parts[2])
        except ValueError:
            continue
        pts.append((mono, int(tr.ts[i]) - mono))
        if native.isdigit():
            tids[int(tr.tid[i])] = int(native)
    return pts, tids


#: How far (ns) a span's mirrored range may start from the span's rebased start to name its thread.
MIRROR_MATCH_NS = 2_000_000


def _by_name(tr: XlaTrace, names: set[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    idx = tr.where(lambda n: n in names)
    out: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for i in idx.tolist():
        a, b = out[tr.name_of(i)]
        a.append(int(tr.ts[i]))
        b.append(int(tr.tid[i]))
    return {k: (np.asarray(a, np.int64), np.asarray(b, np.int64)) for k, (a, b) in out.items()}


def run_spans(data, cmap, native_to_tid: dict[int, int], tr: XlaTrace | None = None) -> list[HostSpan]:
    """The run's spans (not the transaction) on the trace clock and threads: a thread is known by the
    clock markers recorded on it, else by a span's mirrored range (same name, within ``MIRROR_MATCH_NS``)."""
    from ..core.steprules import STEP_ATTR

    prof = data.profile
    out = []
    mirrored = None
    for s in data.spans:
        if s.op == "transaction":
            continue
        native = prof.native_at(s.thread_id, s.start_ns)
        tid = native_to_tid.get(native) if native is not None else None
        a, b = int(cmap.to_trace(s.start_ns)), int(cmap.to_trace(s.end_ns))
        if tid is None and native is not None and tr is not None:  # a thread with no clock marker: its span's
            if mirrored is None:                                    # mirrored xp.Trace range names the thread
                mirrored = _by_name(tr, {x.name for x in data.spans})
            hit = mirrored.get(s.name)
            if hit is not None:
                k = int(np.argmin(np.abs(hit[0] - a))) if len(hit[0]) else -1
                if k >= 0 and abs(int(hit[0][k]) - a) <= MIRROR_MATCH_NS:
                    tid = native_to_tid[native] = int(hit[1][k])
        attrs = s.attrs or {}
        f = attrs.get("code.filepath")
        hs = HostSpan(s.name, a, max(a, b), tid, attrs.get(STEP_ATTR))
        if s.op == "sync":
            hs.sync = attrs.get("sync", s.name)
            hs.where = f"{os.path.basename(f)}:{attrs.get('code.lineno')}" if f else None
            hs.function = attrs.get("code.function")
        hs.scope = s.name.endswith(".__call__") and "Pipeline" in s.name
        out.append(hs)
    return out


def run_xla(data, trace_dir: str | os.PathLike, metrics_path: str | os.PathLike | None = None,
            top: int = 20) -> XlaSummary:
    """A run's XLA trace (``trace_dir``: the run's ``XLA_TRACE_DIR``) joined with its spans, sync sites and
    metrics (``metrics_path``: the run's ``XLA_METRICS``, when it exists). Raises TraceError for an unreadable
    trace, ``runview.AlignError`` for one without stepscope's clock markers."""
    from .runview import AlignError, clock_map_from

    tr = load_xla(Path(trace_dir), require_xla=False)
    pts, tids = clock_points(tr)
    if not pts:
        raise AlignError(f"{tr.files[0]}: no {MARKER} markers; record with `stepscope run --device-trace`")
    cmap = clock_map_from(pts)
    native_to_tid = {native: tid for tid, native in tids.items()}
    doc: dict = {}
    mf = Path(metrics_path) if metrics_path is not None else None
    if mf is not None and mf.exists():
        try:
            doc = small_json(mf.read_bytes(), str(mf))
        except ValueError as e:
            raise TraceError(str(e)) from None
    return analyze(tr, run_spans(data, cmap, native_to_tid, tr), doc.get("snapshots") or [], cmap.to_trace, top,
                   doc.get("unmirrored") or {}, doc.get("error"))
