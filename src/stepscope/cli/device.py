"""``stepscope device``: analyse a run's device trace, or any Kineto trace file."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import typer

from ..device.analysis import summarize_device
from ..device.kineto import load
from ..render.device import print_device
from .common import JsonOpt, StoreOpt, UserError, handles_errors, open_store, out, print_json

TRACE_NAME = "device_trace.json.gz"


def trace_path(target: Optional[str], store: Optional[Path]) -> Path:
    """A Kineto file given directly, or the device trace stored with a run (default: the last run)."""
    if target and Path(target).is_file():
        return Path(target)
    st = open_store(store)
    run_id = st.resolve_id(target)
    p = st.path / "runs" / run_id / TRACE_NAME
    if not p.exists():
        raise UserError(f"run {run_id} has no device trace (record one with `stepscope run --device-trace`)")
    return p


@handles_errors
def device(target: Optional[str] = typer.Argument(None, help="Run id/prefix, or a Kineto trace (.json/.json.gz)."),
           top: int = typer.Option(10, "--top", "-n", help="Rows per table."),
           store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Device idle gaps (host wait / kernel wait / other), host-device syncs, top ops and kernels."""
    summary = summarize_device(load(trace_path(target, store)), top=max(top, 15))
    if as_json:
        print_json({"device": dataclasses.asdict(summary)})
    else:
        print_device(summary, out, top)
