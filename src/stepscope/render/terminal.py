"""Rich tables for the terminal: the run summary and the list of runs."""

from __future__ import annotations

import datetime as dt
import os

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.summary import Summary
from ..model import Run


def fmt_ns(ns: float | int | None) -> str:
    """``1.23 s`` / ``45.6 ms`` / ``789 us`` / ``12 ns``."""
    if ns is None:
        return "-"
    ns = float(ns)
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.0f} us"
    return f"{ns:.0f} ns"


def short_name(name: str, parts: int = 2) -> str:
    """The last ``parts`` dotted parts of a qualified name (``UNet2DConditionModel.forward``)."""
    segs = name.split(".")
    return ".".join(segs[-parts:]) if len(segs) > parts else name


def _column_label(name: str) -> str:
    """A step-table header: the class for a method (``UNet2DConditionModel``), else the function."""
    segs = name.split(".")
    if len(segs) >= 2 and segs[-1] in ("forward", "__call__", "step", "decode", "encode", "encode_prompt") and segs[-2][:1].isupper():
        return segs[-2] if segs[-1] in ("forward", "__call__") else f"{segs[-2]}.{segs[-1]}"
    return segs[-1]


def _where(file: str, line: int) -> str:
    if not file:
        return ""
    return f"{os.path.basename(file)}:{line}"


def print_summary(s: Summary, console: Console, top: int = 10) -> None:
    """The summary of one run, as ``stepscope run`` prints it."""
    status = s.status if s.exit_code in (None, 0) else f"{s.status} (exit {s.exit_code})"
    traced = sum(st.count for st in s.spans)  # the run's own transaction span is not counted
    spans = f"{traced} spans" if s.spans else "no function traced"
    console.print(f"[bold]stepscope run {s.run_id}[/bold]  wall {fmt_ns(s.wall_ns)}  status {status}  "
                  f"{spans}  {s.sample_count} samples")
    if s.spans:
        t = Table(title="Spans", title_justify="left", show_edge=False)
        for col, just in (("name", "left"), ("count", "right"), ("total", "right"), ("mean", "right"),
                          ("p50", "right"), ("p95", "right"), ("max", "right"), ("share", "right")):
            t.add_column(col, justify=just, no_wrap=True, overflow="ellipsis")
        for st in s.spans[: max(top, 12)]:
            name = short_name(st.name) + (f" [red]({st.errors} errors)[/red]" if st.errors else "")
            t.add_row(name, str(st.count), fmt_ns(st.total_ns), fmt_ns(st.mean_ns), fmt_ns(st.p50_ns),
                      fmt_ns(st.p95_ns), fmt_ns(st.max_ns), f"{100 * st.share:.1f}%")
        console.print(t)
    elif not s.unresolved:
        console.print("Name functions to trace with --trace (or `stepscope suggest` after this run).")
    if s.steps is not None and s.steps.rows:
        st = s.steps
        title = "Steps (diffusion.step)" if st.kind == "diffusion.step" else f"Repeats of {short_name(st.span_name)}"
        t = Table(title=title, title_justify="left", caption=st.rule, caption_justify="left", show_edge=False)
        t.add_column("call" if st.kind == "diffusion.step" else "", justify="right", no_wrap=True, min_width=4)
        t.add_column("step" if st.kind == "diffusion.step" else "repeat", justify="right", no_wrap=True, min_width=6)
        t.add_column("wall", justify="right", no_wrap=True, min_width=8)
        t.add_column("x median", justify="right", no_wrap=True, min_width=10)
        for c in st.columns[:5]:
            t.add_column(_column_label(c), justify="right", no_wrap=True, min_width=8, max_width=22, overflow="ellipsis")
        rows = st.rows
        if len(rows) > 40:  # keep the table readable: slow rows and the first/last few
            keep = {id(r) for r in rows[:5] + rows[-5:]} | {id(r) for r in rows if r.slow}
            rows = [r for r in rows if id(r) in keep]
        for r in rows:
            style = "bold red" if r.slow else None
            t.add_row(str(r.call) if st.kind == "diffusion.step" else "", str(r.step), fmt_ns(r.wall_ns),
                      f"{r.ratio:.2f}" + (" slow" if r.slow else ""),
                      *[fmt_ns(r.by_name.get(c)) for c in st.columns[:5]], style=style)
        console.print(t)
        slow = st.slow_rows
        if slow:
            console.print(f"[bold red]{len(slow)} slow[/bold red] of {len(st.rows)}: "
                          + ", ".join(f"{r.step} ({r.ratio:.1f}x)" for r in slow[:12]))
    if s.top_self:
        for title, items, key in (("Top functions by self time (sampled)", s.top_self, "self"),
                                  ("Top functions by total time (sampled)", s.top_total, "total")):
            t = Table(title=title, title_justify="left", show_edge=False)
            t.add_column("function", no_wrap=True, overflow="ellipsis")
            t.add_column("where", style="dim", no_wrap=True, overflow="ellipsis")
            t.add_column(key, justify="right", no_wrap=True)
            t.add_column("share", justify="right")
            for f in items[:top]:
                ns, share = (f.self_ns, f.self_share) if key == "self" else (f.total_ns, f.total_share)
                t.add_row(Text(short_name(f.name, 3)), _where(f.file, f.line), fmt_ns(ns), f"{100 * share:.1f}%")
            console.print(t)
    elif s.sample_count == 0:
        console.print("No samples (sampling off, or the program ended within one sampling period).")
    for name, why in s.unresolved.items():
        console.print(unresolved_line(name, why))


def unresolved_line(name: str, why: str) -> str:
    """One line for a name that was not traced, or that ran inside a torch.compile region."""
    if why.startswith("inside a compiled region"):
        return f"[cyan]compiled:[/cyan] {name}: {why}"
    if why.startswith("not mirrored"):
        return f"[cyan]unmirrored:[/cyan] {name}: {why}"
    return f"[yellow]not traced:[/yellow] {name}: {why}"


def print_runs(runs: list[Run], console: Console) -> None:
    """The stored runs, newest first."""
    t = Table(show_edge=False)
    for col in ("run", "started", "wall", "status", "spans", "samples", "command"):
        t.add_column(col, justify="right" if col in ("wall", "spans", "samples") else "left")
    for r in runs:
        started = dt.datetime.fromtimestamp(r.anchor_wall_ns / 1e9).strftime("%Y-%m-%d %H:%M:%S") if r.anchor_wall_ns else "-"
        status = r.status if r.exit_code in (None, 0) else f"{r.status} ({r.exit_code})"
        t.add_row(r.id, started, fmt_ns(r.wall_time_ns), status, str(r.span_count), str(r.sample_count),
                  " ".join(r.command)[:60])
    console.print(t)
