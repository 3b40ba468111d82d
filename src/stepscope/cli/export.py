"""``stepscope export``: a run as speedscope or Chrome trace JSON."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..export import FORMATS, WRITERS
from ..store.db import DEVICE_TRACE
from .common import JsonOpt, StoreOpt, UserError, handles_errors, open_store, out, print_json

_SUFFIX = {"speedscope": ".speedscope.json", "chrome": ".trace.json"}


@handles_errors
def export(run_id: Optional[str] = typer.Argument(None, help="Run id or prefix (default: the last run)."),
           fmt: str = typer.Option("speedscope", "--format", "-f", help="speedscope or chrome."),
           output: Optional[Path] = typer.Option(None, "-o", "--output", help="Output file; - for stdout."),
           store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Export a run (spans and samples) to speedscope or Chrome trace / Perfetto JSON (with the device
    timeline when the run recorded one)."""
    if fmt not in FORMATS:
        raise UserError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    st = open_store(store)
    from ..store.reader import load_run

    data = load_run(st, run_id)
    device = None
    trace_file = st.run_file(data.run.id, DEVICE_TRACE)
    if fmt == "chrome" and trace_file.exists():
        from ..device.kineto import load
        from ..device.runview import clock_map

        trace = load(trace_file)
        device = (trace, clock_map(trace))
    write = WRITERS[fmt]

    def stream(fh) -> int:  # written as it is made: a million spans never sit in memory as one document
        return write(data, fh, device=device) if device else write(data, fh)

    if output is not None and str(output) == "-":
        stream(sys.stdout.buffer)
        sys.stdout.buffer.write(b"\n")
        sys.stdout.buffer.flush()
        return
    path = output or Path(f"stepscope-{data.run.id}{_SUFFIX[fmt]}")
    with open(path, "wb") as fh:
        size = stream(fh)
    if as_json:
        print_json({"run_id": data.run.id, "format": fmt, "path": str(path), "bytes": size})
    else:
        out.print(f"{fmt}: {path} ({size / 2**20:.1f} MiB)")
