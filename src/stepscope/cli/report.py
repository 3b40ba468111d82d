"""``stepscope report``: write a run's self-contained HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..report.html import device_for, write_report
from .common import JsonOpt, StoreOpt, handles_errors, open_store, out, print_json


@handles_errors
def report(run_id: Optional[str] = typer.Argument(None, help="Run id or prefix (default: the last run)."),
           output: Optional[Path] = typer.Option(None, "-o", "--output", help="HTML file (default: stepscope-RUN.html)."),
           store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Write the HTML report of a run: waterfall, flame graphs, step table (opens offline)."""
    st = open_store(store)
    data = st.load(run_id)
    path = write_report(data, output or Path(f"stepscope-{data.run.id}.html"), device=device_for(st, data))
    if as_json:
        print_json({"run_id": data.run.id, "report": str(path), "bytes": path.stat().st_size})
    else:
        out.print(f"report: {path} ({path.stat().st_size / 2**20:.1f} MiB)")
