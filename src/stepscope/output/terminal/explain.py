"""Terminal rendering of ``explain`` and ``suggest`` results."""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from ...analysis.difftree import DiffNode
from ...analysis.explain import Explanation
from ...analysis.suggest import Suggestion
from ...core.units import fmt_ns
from .cells import left_short, name_room, num_col, short_name
from .difftree import signed_ns, tree_view
from .summary import shape_words


def print_explanation(e: Explanation, console: Console, tree_depth: int = 12) -> None:
    unit = "denoising steps" if e.unit == "step" else f"repeats of {short_name(e.unit)}"
    slow = e.slow
    console.print(f"[bold]Explain {unit}[/bold]: {len(e.repeats)} repeats, median {fmt_ns(e.median_ns)}")
    console.print(f"[dim]{e.rule}[/dim]")
    if not slow:
        console.print(e.advice)
        return
    shape = shape_words(e.shape)
    console.print(f"[bold red]{len(slow)} slow[/bold red] ({shape}): "
                  + ", ".join(f"{r.label} {fmt_ns(r.duration_ns)} ({r.duration_ns / e.median_ns:.1f}x)" for r in slow[:12]))
    console.print(f"slow mean {fmt_ns(e.slow_mean_ns)} vs fast mean {fmt_ns(e.fast_mean_ns)}: gap {fmt_ns(e.gap_ns)} per repeat")
    if e.memory_note:
        console.print(f"[bold]memory[/bold]: {escape(e.memory_note)}")
    if not e.enough_samples or e.advice:
        console.print(f"[yellow]{e.advice}[/yellow]")
        return
    vals = [(fmt_ns(c.slow_ns), fmt_ns(c.fast_ns), signed_ns(c.delta_ns), f"{100 * c.share_of_gap:.0f}%") for c in e.causes]
    t = Table(title="What makes the difference (self time per repeat)", title_justify="left", show_edge=False)
    t.add_column("function", overflow="fold", ratio=2)
    for k, col in enumerate(("slow", "fast", "extra", "of gap")):
        num_col(t, col, [v[k] for v in vals])
    room = name_room(console, t, 40)
    t.add_column("where", overflow="fold", ratio=1)
    for c, v in zip(e.causes, vals):
        t.add_row(left_short(c.function, room * 2 // 3), *v, _where(c))
    console.print(t)
    console.print(f"these cover {100 * e.covered:.0f}% of the gap")
    if e.path:
        console.print("the extra time runs in: [bold]" + " > ".join(short_name(n, 3) for n in e.path) + "[/bold]")
    if e.entry is not None:
        console.print(f"the extra time enters at [bold]{e.entry.function}[/bold] ({escape(_where(e.entry))}), "
                      f"{signed_ns(e.entry.delta_ns)} per repeat")
    if e.tree is not None:
        console.print(_tree(e.tree, e.gap_ns, tree_depth))


def _where(c) -> str:
    """A cause's file and line, or its file and why it has no line."""
    return f"{os.path.basename(c.file)}:{c.line}" if c.line else f"{os.path.basename(c.file)} ({c.line_note or 'no line'})"


def _tree(root: DiffNode, gap: float, depth: int) -> Tree:
    """The differential tree, following only branches that carry a real share of the gap."""
    limit = 0.05 * abs(gap) if gap else 0
    return tree_view(root, "differential call tree (slow / fast per repeat, extra)", depth, limit,
                     lambda c: not (abs(c.delta_ns) < limit and c.b_ns < 0.25 * root.b_ns), b_first=True)


def print_suggestions(items: list[Suggestion], console: Console) -> None:
    if not items:
        console.print("Nothing to suggest: no samples inside traced spans below the traced functions.")
        return
    t = Table(title="Trace next (time inside traced spans, not yet traced)", title_justify="left", show_edge=False)
    t.add_column("function", overflow="fold", ratio=2)
    t.add_column("where", overflow="fold", ratio=1)
    num_col(t, "total", [fmt_ns(s.total_ns) for s in items])
    num_col(t, "share", [f"{100 * s.share:.0f}%" for s in items])
    num_col(t, "in spans", [str(s.repeats) for s in items])
    for s in items:
        t.add_row(s.qualified_name, f"{os.path.basename(s.file)}:{s.line}", fmt_ns(s.total_ns), f"{100 * s.share:.0f}%",
                  str(s.repeats))
    console.print(t)
    console.print("as flags:  " + " ".join(f"--trace {s.qualified_name}" for s in items))
    console.print("as code:   functions_to_trace=[" + ", ".join(repr(s.qualified_name) for s in items) + "]")
