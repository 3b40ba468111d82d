"""Terminal rendering of a benchmark verdict (the seed's table: runtime, change in %, CI)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..bench.results import Verdict


def print_verdict(v: Verdict, console: Console) -> None:
    console.print(f"[bold]benchmark {v.bench_id}[/bold]  status {v.status}")
    with_steps = any(r.step_median_s for r in v.rows)
    with_mem = any(r.peak_bytes for r in v.rows)
    cols = ["configuration", "runs", "median", "95% CI", "CV", "change", "change 95% CI", "verdict", "warm-up"]
    cols += ["per step"] if with_steps else []
    cols += ["peak mem"] if with_mem else []
    t = Table(show_edge=False)
    for col in cols:
        t.add_column(col, justify="left" if col in ("configuration", "verdict") else "right", no_wrap=True,
                     min_width={'change': 8, 'verdict': 25}.get(col, len(col)), max_width=36 if col == "configuration" else None, overflow="ellipsis")
    problems: list[str] = []
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
                cells["peak mem"] = f"{r.peak_bytes / 2**20:.0f} MiB"
        t.add_row(*[cells.get(c, "-") for c in cols])
    console.print(t)
    for p in problems:
        console.print(f"[yellow]not run:[/yellow] {p}")
    for w in v.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
