"""Terminal rendering of ``stepscope diff`` (``analysis.diff.Diff``), in the diff's order: environment,
time, where the time went, verdict (the verdict is printed first too, as the one line to read)."""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from ...analysis.diff import Diff
from ...analysis.difftree import DiffNode
from ...analysis.timestats import TimeChange
from ...core.units import fmt_ns
from .cells import short_name
from .difftree import signed_ns, tree_view


def change_text(tc: TimeChange) -> str:
    """``+80.1% (CI +75.0% to +85.2%)``, ``+3.0%`` without a CI, ``-`` without a change."""
    if tc.change is None:
        return "-"
    s = f"{100 * tc.change:+.1f}%"
    if tc.ci_low is not None:
        s += f" (CI {100 * tc.ci_low:+.1f}% to {100 * tc.ci_high:+.1f}%)"
    if tc.adjusted is not None:
        s += f" [{100 * tc.adjusted:+.1f}% without CPU contention]"
    return s


def _style(tc: TimeChange) -> str:
    if not tc.significant or tc.change is None:
        return "dim" if tc.only_in is None else "yellow"
    return "red" if tc.change > 0 else "green"


def _time_table(title: str, rows: list[TimeChange], names: bool = True) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False)
    for col, j in (("name" if names else "step", "left"), ("A", "right"), ("B", "right"), ("n A/B", "right"),
                   ("change of median (95% CI)", "right"), ("verdict", "left")):
        t.add_column(col, justify=j, no_wrap=True, overflow="ellipsis", max_width=52 if col == "name" else None,
                     min_width=len(col))
    for r in rows:
        st = _style(r)
        v = "no CI (< 3 repeats)" if r.ci_low is None and r.change is not None and not r.only_in else r.verdict
        t.add_row(escape(short_name(r.name, 3) if names else r.name), fmt_ns(r.median_a_ns) if r.n_a else "-",
                  fmt_ns(r.median_b_ns) if r.n_b else "-", f"{r.n_a}/{r.n_b}", change_text(r),
                  f"[{st}]{escape(v)}[/{st}]")
    return t


def print_diff(d: Diff, console: Console, tree_depth: int = 10, max_spans: int = 20) -> None:
    """The whole diff, as ``stepscope diff`` prints it."""
    console.print(f"[bold]stepscope diff[/bold]  A {d.run_a}{' (sentry)' if d.source_a == 'sentry' else ''}  ->  "
                  f"B {d.run_b}{' (sentry)' if d.source_b == 'sentry' else ''}")
    console.print(f"[bold]verdict:[/bold] {escape(d.verdict)}")
    # 1. environment
    if d.env:
        t = Table(title="1. What changed in the environment (most likely causes first)", title_justify="left", show_edge=False)
        for col in ("kind", "what", "A", "B"):
            t.add_column(col, no_wrap=col in ("kind",), overflow="fold")
        for c in d.env:
            style = "bold" if d.cause is not None and c.key == d.cause.key else ""
            t.add_row(c.kind, f"[{style}]{escape(c.label)}[/{style}]" if style else escape(c.label), escape(c.before),
                      escape(c.after))
        console.print(t)
    else:
        console.print("1. environment: nothing recorded differs")
    # 2. time
    h = d.headline
    console.print(f"2. [bold]{escape(d.unit_label)}[/bold]: median {fmt_ns(h.median_a_ns)} -> {fmt_ns(h.median_b_ns)}  "
                  f"{change_text(h)}  over {h.n_a}/{h.n_b} repeats: [{_style(h)}]{h.verdict}[/{_style(h)}]")
    ph = Table(title="start-up apart from the work", title_justify="left", show_edge=False)
    for col, j in (("phase", "left"), ("A", "right"), ("B", "right"), ("change", "right")):
        ph.add_column(col, justify=j, no_wrap=True)
    for p in d.phases:
        delta = signed_ns(p.b_ns - p.a_ns) if p.a_ns is not None and p.b_ns is not None else "-"
        ph.add_row(p.name, fmt_ns(p.a_ns), fmt_ns(p.b_ns), delta)
    console.print(ph)
    if d.spans:
        console.print(_time_table("per span name (median of its calls)", d.spans[:max_spans]))
        if len(d.spans) > max_spans:
            console.print(f"[dim]... {len(d.spans) - max_spans} more span names (--json lists them all)[/dim]")
    if d.steps:
        console.print(_time_table("per denoising step", d.steps, names=False))
    # 3. where
    if d.functions:
        t = Table(title=f"3. Functions whose self time {'grew' if h.change is None or h.change >= 0 else 'shrank'} most "
                  f"({d.normalisation})", title_justify="left", show_edge=False)
        for col, j in (("function", "left"), ("where", "left"), ("A", "right"), ("B", "right"), ("change", "right"),
                       ("of the change", "right")):
            t.add_column(col, justify=j, no_wrap=True, overflow="ellipsis")
        for f in d.functions:
            t.add_row(escape(f.function), escape(os.path.basename(f.file)), fmt_ns(f.a_ns), fmt_ns(f.b_ns), signed_ns(f.delta_ns),
                      f"{100 * f.share:.0f}%")
        console.print(t)
    if d.flame is not None:
        console.print(_tree(d.flame, tree_depth))
    if d.ops:
        t = Table(title=f"device ops and kernels (self time {d.normalisation})", title_justify="left", show_edge=False)
        for col, j in (("kind", "left"), ("name", "left"), ("A", "right"), ("B", "right"), ("calls A/B", "right"), ("", "left")):
            t.add_column(col, justify=j, no_wrap=True, overflow="ellipsis")
        for o in d.ops:
            t.add_row(o.kind, escape(o.name[:80]), fmt_ns(o.a_ns), fmt_ns(o.b_ns), f"{o.a_count}/{o.b_count}", o.status)
        console.print(t)
    for n in d.notes:
        console.print(f"[yellow]{escape(n)}[/yellow]")
    if d.ranks:
        t = Table(title=f"by rank: {escape(d.rank_step or '')} (median per step; steps held up as the straggler)",
                  title_justify="left", show_edge=False)
        for col in ("rank", "steps A", "steps B", "wall A", "wall B", "B / A", "ran A", "ran B", "led A", "led B"):
            t.add_column(col, justify="right")
        for r in d.ranks:
            t.add_row(str(r.rank), str(r.steps_a), str(r.steps_b), fmt_ns(r.wall_a_ns), fmt_ns(r.wall_b_ns),
                      "-" if r.ratio is None else f"{r.ratio:.2f}x", fmt_ns(r.busy_a_ns), fmt_ns(r.busy_b_ns),
                      str(r.led_a), str(r.led_b))
        console.print(t)
    console.print(f"[bold]4. verdict:[/bold] {escape(d.verdict)}")


def _tree(root: DiffNode, depth: int) -> Tree:
    """The differential flame graph as a tree: branches of at least 2% of the time per repeat, a chain
    of single children folded into one line (``a > … > z``)."""
    limit = 0.02 * (max(root.a_ns, root.b_ns) or 1.0)
    return tree_view(root, "differential flame graph (A / B per repeat, change)", depth, limit,
                     lambda c: max(c.a_ns, c.b_ns) >= limit, fold=True)
