"""``stepscope report``: write a run's self-contained HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from .common import PATH, JsonOpt, StoreOpt, argument, command, handles_errors, open_store, out, print_json


@command("report")
@argument("run_id", required=False, help="Run id or prefix (default: the last run).")
@click.option("-o", "--output", type=PATH, default=None, help="HTML file (default: stepscope-RUN.html).")
@click.option("--against", default=None, help="Compare the run with this one (run A, before) instead: the "
              "`stepscope diff` page as a file.")
@click.option("--span", default=None, help="With --against: the span name to compare per call.")
@StoreOpt
@JsonOpt
@handles_errors
def report(run_id: Optional[str], output: Optional[Path], against: Optional[str], span: Optional[str],
           store: Optional[Path], as_json: bool) -> None:
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
    from ..device.view import device_view
    from ..output.html.html import write_report
    from ..store.reader import load_run

    data = load_run(st, run_id)
    path = write_report(data, output or Path(f"stepscope-{data.run.id}.html"), device=device_view(st, data.run.id, data))
    if as_json:
        print_json({"run_id": data.run.id, "report": str(path), "bytes": path.stat().st_size})
    else:
        out.print(f"report: {path} ({path.stat().st_size / 2**20:.1f} MiB)")
