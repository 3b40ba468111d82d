"""``stepscope report``: write a run's self-contained HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..device.view import device_view
from ..output.html.html import write_report
from .common import JsonOpt, StoreOpt, handles_errors, open_store, out, print_json


@handles_errors
def report(run_id: Optional[str] = typer.Argument(None, help="Run id or prefix (default: the last run)."),
           output: Optional[Path] = typer.Option(None, "-o", "--output", help="HTML file (default: stepscope-RUN.html)."),
           against: Optional[str] = typer.Option(None, "--against", help="Compare the run with this one (run A, "
                                                 "before) instead: the `stepscope diff` page as a file."),
           span: Optional[str] = typer.Option(None, "--span", help="With --against: the span name to compare per call."),
           store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Write the HTML report of a run: waterfall, flame graphs, step table (opens offline); with --against RUN_A,
    the comparison of the two runs."""
    st = open_store(store)
    if against is not None:
        from ..output.html.compare import compare_page
        from .diff import load_diff

        d = load_diff(st, against, run_id or "last", span)
        path = output or Path(f"stepscope-{d.run_b}-vs-{d.run_a}.html")
        path.write_text(compare_page(d, standalone=True), encoding="utf-8")
        if as_json:
            print_json({"run_id": d.run_b, "against": d.run_a, "report": str(path), "bytes": path.stat().st_size,
                        "verdict": d.verdict})
        else:
            out.print(f"comparison: {path} ({path.stat().st_size / 1e6:.2f} MB)")
            out.print(f"verdict: {d.verdict}", markup=False)
        return
    from ..store.reader import load_run

    data = load_run(st, run_id)
    path = write_report(data, output or Path(f"stepscope-{data.run.id}.html"), device=device_view(st, data.run.id, data))
    if as_json:
        print_json({"run_id": data.run.id, "report": str(path), "bytes": path.stat().st_size})
    else:
        out.print(f"report: {path} ({path.stat().st_size / 2**20:.1f} MiB)")
