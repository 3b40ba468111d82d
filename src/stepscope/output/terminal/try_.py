"""``stepscope try`` in the terminal: the verdict table, the fixes that did not apply, the recommendation."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from ...bench.results import MiB
from ...analysis.fixhints import FixHint
from ...fixes.verdict import Row, TryVerdict, verdict_word


def _change(ch) -> str:
    if ch is None:
        return "-"
    return f"{100 * ch.change:+.1f}% ({100 * ch.ci_low:+.0f}..{100 * ch.ci_high:+.0f})"


def _mem(r: Row) -> str:
    if not r.peak_bytes:
        return "-"
    base = f"{r.peak_bytes / MiB:,.0f}M"
    return base if r.peak_change is None else f"{base} ({100 * r.peak_change:+.0f}%)"


def _output(r: Row) -> str:
    o = r.output
    if r.index == 0:
        return "reference"
    if o.get("error"):
        return o["error"]
    if o.get("max_abs_diff") is None:
        return "not finite" if o.get("finite") is False else "-"
    psnr = o.get("psnr_db")
    return "identical" if psnr == math.inf else f"{o['max_abs_diff']:.2g} ({psnr:.0f}dB)"


_COLOUR = {"failed": "yellow", "faster": "green", "faster, more memory": "yellow", "slower": "red"}


def _verdict(r: Row) -> str:
    word = verdict_word(r)
    c = _COLOUR.get(word)
    return f"[{c}]{word}[/{c}]" if c else word


def print_try(v: TryVerdict, console: Console) -> None:
    """The verdict table (medians: ms per step, s per call; changes with their 95% CI) and the lines below it."""
    console.print(f"[bold]stepscope try {v.bench_id}[/bold]  status {v.status}")
    if v.measured:
        console.print(f"measured: {v.measured}")
    runs = sorted({r.call.n for r in v.rows if r.call})
    if runs:
        console.print("medians of " + "/".join(map(str, runs)) + " timed calls per configuration (interleaved); a step: "
                      "scheduler step end to the next; warm-up: the first, untimed call; memory in MiB; output: max "
                      "|diff| from the baseline's and PSNR")
    t = Table(show_edge=False, padding=(0, 1), pad_edge=False)
    cols = ["configuration", "step", "change (95% CI)", "call", "change (95% CI) ", "peak mem", "warm-up",
            "output |diff|", "verdict"]
    for c in cols:
        if c == "configuration":  # the longest fix name on one line; a long combination folds
            t.add_column(c, overflow="fold", min_width=min(24, max(len(r.label) for r in v.rows)))
        elif c == "verdict":
            t.add_column(c, overflow="fold", min_width=12)
        else:
            t.add_column(c.strip(), justify="right", no_wrap=True)
    for r in v.rows:
        warm = "-" if r.warmup_s is None else f"{r.warmup_s:.1f}s"
        if r.compile_s is not None:
            warm += f" (compile {r.compile_s:.1f}s)"
        t.add_row(r.label, f"{1e3 * r.step.median:.1f}ms" if r.step else "-", _change(r.step_change),
                  f"{r.call.median:.3f}s" if r.call else "-", _change(r.call_change), _mem(r), warm, _output(r),
                  _verdict(r))
    console.print(t)
    for fix, why in v.not_applicable.items():
        console.print(f"[dim]not applicable:[/dim] {fix}: {why}")
    for r in v.rows:
        if r.problem:
            console.print(f"[yellow]failed:[/yellow] {r.label}: {r.problem}")
    for w in v.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    console.print(f"[bold]recommendation:[/bold] {v.recommendation}")


def print_fix_hints(hints: list[FixHint], command: str | None, console: Console) -> None:
    """``suggest``'s fixes that apply to the run, and the ``stepscope try`` line that measures them."""
    if not hints:
        return
    console.print("[bold]Fixes that apply to this run[/bold] (measure them on the program, unmodified):")
    for h in hints:
        console.print(f"  {h.fix}: {h.why}", markup=False)
    if command:
        console.print(f"  {command}", markup=False, soft_wrap=True)
