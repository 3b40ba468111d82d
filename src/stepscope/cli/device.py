"""``stepscope device``: analyse a run's device trace (Kineto or PyTorch/XLA), or any Kineto trace file or
XLA profiler capture (``plugins/profile/<time>/`` or its ``<host>.trace.json.gz``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

import click

from ..core import limits
from .common import JsonOpt, StoreOpt, UserError, argument, command, handles_errors, open_store, out, print_json


def looks_like_file(arg: str) -> bool:
    """Whether a RUN-or-file argument names a file rather than a run id: it holds a path separator, starts
    with ``.`` or ``~``, or ends in ``.json``, ``.gz`` (run ids have none of these)."""
    return ("/" in arg or os.sep in arg or bool(os.altsep and os.altsep in arg) or arg.startswith((".", "~"))
            or arg.lower().endswith((".json", ".gz")))


def trace_file(target: Optional[str]) -> Optional[Path]:
    """The trace file ``target`` names, or None when it is a run reference. Raises UserError for a
    file-shaped argument that is missing (``file not found: X``) or not a file."""
    if not target:
        return None
    p = Path(target).expanduser()
    if p.is_file():
        return p
    if p.is_dir() and not target.lower().rstrip("/").endswith((".json", ".gz")) and (
            looks_like_file(target) or (p / "plugins").is_dir() or any(p.glob("*.trace.json*"))):
        return p  # an XLA capture folder
    if looks_like_file(target):
        raise UserError(f"file not found: {target}" if not p.exists() else f"{target}: not a file (give a Kineto trace "
                        ".json/.json.gz, an XLA capture folder, or a run id)")
    return None


def rank_traces(target: Optional[str]) -> list[Path]:
    """The Kineto traces of a folder of per-rank traces (two or more ``*.json``/``*.json.gz`` files, as HTA reads
    a job), sorted by name; [] for anything else (a run, a file, an XLA capture folder)."""
    if not target:
        return []
    p = Path(target).expanduser()
    if not p.is_dir() or (p / "plugins").is_dir() or any(p.glob("*.trace.json*")) and not any(p.glob("*.pt.trace.json*")):
        return []
    files = sorted(f for f in p.iterdir() if f.is_file() and f.name.lower().endswith((".json", ".json.gz")))
    return files if len(files) >= 2 else []


def _print_ranks(items: list, as_json: bool, doc: dict | None = None) -> None:
    from ..device.ranks import ranks_device

    r = ranks_device(items)
    if as_json:
        print_json({**(doc or {}), "ranks": dataclasses.asdict(r)})
    else:
        from ..output.terminal.device import print_ranks_device

        print_ranks_device(r, out)


def _xla_view(path: Path, top: int):
    from ..device.view import XLA_TOP
    from ..device.xla import analyze
    from ..device.xla_load import load_xla

    return analyze(load_xla(path), top=max(top, XLA_TOP))


@command("device")
@argument("target", required=False, help="Run id/prefix, a Kineto trace (.json/.json.gz), or an XLA capture "
          "(plugins/profile/<time>/ or <host>.trace.json.gz).")
@click.option("--top", "-n", type=int, default=10, help="Rows per table.")
@StoreOpt
@JsonOpt
@handles_errors
def device(target: Optional[str], top: int, store: Optional[Path], as_json: bool) -> None:
    """Device idle gaps (host wait / kernel wait / other), host-device syncs with their Python line and
    span, per-span host vs device time, top ops and kernels. Without a device trace: the sync sites.
    PyTorch/XLA: graph compilations, graph executions and transfers (with their Python line) per step and
    per span, device idle gaps, torch_xla metrics per step."""
    limits.in_range("--top", top, 1, 1000, integer=True)
    ranks = rank_traces(target)
    path = None if ranks else trace_file(target)
    if path is not None and not path.is_dir():  # read and gunzipped once, in a thread while the imports below run
        from ..device.rawread import Prefetch

        pending = Prefetch(path)
    from ..device.analysis import summarize_device
    from ..device.kineto import TraceError, load

    if ranks:  # a folder of per-rank Kineto traces (HTA's input): the ranks side by side
        _print_ranks([(str(p), load(p)) for p in ranks], as_json)
        return
    if path is not None:
        import numpy as np

        from ..device.kineto import DEVICE_CATS
        from ..device.xla_load import SIGNATURE, looks_xla

        raw = None if path.is_dir() else pending.result()
        trace = None
        if raw is not None:
            try:
                trace = load(path, raw)
            except TraceError:
                if not looks_xla(path, raw):
                    raise
        # PyTorch/XLA's: by its events' names, read in the parse; a trace with no device activity is searched for
        # them whole (an XLA trace whose only signature events are not complete ones)
        if trace is None or not set(SIGNATURE).isdisjoint(trace.names) or (
                not np.isin(trace.cat, DEVICE_CATS).any() and looks_xla(path, raw)):
            del raw, trace
            x = _xla_view(path, top)
            if as_json:
                print_json({"xla": dataclasses.asdict(x)})
            else:
                from ..output.terminal.device import print_xla

                print_xla(x, out, top)
            return
        del raw
        summary = summarize_device(trace, top=max(top, 15))
        if as_json:
            print_json({"device": dataclasses.asdict(summary)})
        else:
            from ..output.terminal.device import print_device  # (rich and the terminal renderers: not for --json)

            print_device(summary, out, top)
        return
    from ..device.ranks import ranks_device
    from ..device.runview import AlignError
    from ..device.view import XLA_TOP, device_view
    from ..output.terminal.device import print_run_device, print_xla

    from ..store.reader import load_run

    st = open_store(store)
    data = load_run(st, target)  # spans as columns: only those the device trace covers become objects
    try:
        dv = device_view(st, data.run.id, data, top=max(top, XLA_TOP))
    except (AlignError, TraceError) as e:
        raise UserError(str(e)) from None
    view, xla = dv.kineto, dv.xla
    per_rank = [(p.label, p.trace, p.rank) for p in dv.processes]
    if dv.empty and per_rank:  # a job whose ranks recorded the device timeline: the ranks side by side
        _print_ranks(per_rank, as_json, {"run_id": data.run.id})
        return
    if dv.empty:
        raise UserError(f"run {data.run.id} has no device trace, sync sites or compile report "
                        "(record with `stepscope run --device-trace`, `--syncs` or `--compile-report`)")
    if as_json:
        doc = {"run_id": data.run.id, "device": dataclasses.asdict(view)}
        if xla is not None:
            doc["xla"] = dataclasses.asdict(xla)
        if per_rank:
            doc["ranks"] = dataclasses.asdict(ranks_device(per_rank))
        print_json(doc)
    else:
        if xla is not None:
            print_xla(xla, out, top)
        print_run_device(view, out, top, xla=xla is not None)
        if per_rank:
            _print_ranks(per_rank, False)
