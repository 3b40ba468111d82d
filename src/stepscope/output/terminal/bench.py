"""Terminal rendering of a benchmark verdict (the seed's table: runtime, change in %, CI)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...bench.results import Verdict, mem_text


def print_verdict(v: Verdict, console: Console) -> None:
    console.print(f"[bold]benchmark {v.bench_id}[/bold]  status {v.status}")
    if v.measured:
        console.print(f"measured: {v.measured}")
    with_steps = any(r.step_median_s for r in v.rows)
    with_mem = any(r.peak_bytes for r in v.rows)
    cols = ["configuration", "runs", "median", "95% CI", "CV", "change", "change 95% CI", "verdict", "warm-up"]
    cols += ["per step"] if with_steps else []
    cols += ["peak mem"] if with_mem else []
    problems: list[str] = []
    table_rows: list[list[str]] = []
    for r in v.rows:
        cells: dict[str, str] = {"configuration": r.label}
        if r.stats is None:
            word = "unavailable" if r.problem and "unavailable" in r.problem else "failed" if r.problem else "no runs"
            cells.update(runs="0", verdict=f"[yellow]{word}[/yellow]")
            if r.problem:
                problems.append(f"{r.label}: {r.problem}")
        else:
            s = r.stats
            cells.update({"runs": str(s.n), "median": f"{s.median:.3f} s", "95% CI": f"{s.ci_low:.3f}-{s.ci_high:.3f}",
                          "CV": f"{100 * s.cv:.1f}%"})
            if r.is_baseline:
                cells["change"] = "baseline"
            elif r.change is not None:
                c = r.change
                cells["change"] = f"{100 * c.change:+.1f}%"
                cells["change 95% CI"] = f"{100 * c.ci_low:+.1f} .. {100 * c.ci_high:+.1f}"
                cells["verdict"] = (("[green]faster[/green]" if c.change < 0 else "[red]slower[/red]") if c.significant
                                    else "no significant difference")
            if r.first_warmup_s:
                cells["warm-up"] = f"{r.first_warmup_s:.2f} s"
            if r.step_median_s:
                cells["per step"] = f"{1e3 * r.step_median_s:.1f} ms"
            if r.peak_bytes:
                cells["peak mem"] = mem_text(r.peak_bytes)
        table_rows.append([cells.get(c, "-") for c in cols])
    keep = [k for k, col in enumerate(cols) if col in ("configuration", "verdict") or any(row[k] != "-" for row in table_rows)]
    cols = [cols[k] for k in keep]
    table_rows = [[row[k] for k in keep] for row in table_rows]
    t = Table(show_edge=False, padding=(0, 1), pad_edge=False)
    for k, col in enumerate(cols):
        widest = max([len(col)] + [len(Text.from_markup(row[k]).plain) for row in table_rows])
        if col == "configuration":  # names give way (folded); numbers and verdicts are never cut
            t.add_column(col, justify="left", overflow="fold", ratio=1, min_width=min(widest, 16))
        elif col == "verdict":  # words wrap onto a second line rather than being cut
            t.add_column(col, justify="left", overflow="fold", min_width=min(widest, 12))
        else:
            t.add_column(col, justify="right", no_wrap=True, overflow="fold", min_width=widest)
    for row in table_rows:
        t.add_row(*row)
    console.print(t)
    for p in problems:
        console.print(f"[yellow]not run:[/yellow] {p}")
    for w in v.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
