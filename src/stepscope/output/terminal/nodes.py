"""The per-node tables (``analysis.nodes``) for the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...analysis.nodes import NodeTable
from ...core.units import fmt_ns
from .cells import left_short, name_room, num_col


def print_nodes(nt: NodeTable, console: Console, top: int = 12) -> None:
    """Nodes across prompts (runs, cached, total, mean, p50, p95, std, share), then one row per prompt."""
    rows = nt.nodes[:top]
    t = Table(title="Nodes (per node, across prompts; cached: returned from the app's cache, not run)",
              title_justify="left", show_edge=False)
    t.add_column("node", overflow="fold", ratio=1, min_width=16)
    num_col(t, "runs", [str(n.count) for n in rows])
    num_col(t, "cached", [str(n.cached) for n in rows])
    cells = [[fmt_ns(n.total_ns), fmt_ns(n.mean_ns), fmt_ns(n.p50_ns), fmt_ns(n.p95_ns), fmt_ns(n.std_ns),
              f"{100 * n.share:.1f}%"] for n in rows]
    for k, col in enumerate(("total", "mean", "p50", "p95", "std", "share")):
        num_col(t, col, [c[k] for c in cells])
    room = name_room(console, t)
    for n, c in zip(rows, cells):
        t.add_row(Text(left_short(n.name, room)), str(n.count), str(n.cached), *c)
    console.print(t)
    if len(nt.nodes) > top:
        console.print(f"[dim]{len(nt.nodes) - top} more nodes: `stepscope explain` or the report[/dim]")
    if nt.prompts:
        p = Table(title="Prompts", title_justify="left", show_edge=False)
        p.add_column("prompt", overflow="fold", min_width=6)
        num_col(p, "wall", [fmt_ns(r.wall_ns) for r in nt.prompts])
        num_col(p, "ran", [str(r.ran) for r in nt.prompts])
        num_col(p, "cached", [str(r.cached) for r in nt.prompts])
        num_col(p, "in nodes", [fmt_ns(r.node_ns) for r in nt.prompts])
        p.add_column("slowest node", overflow="fold", ratio=1)
        for r in nt.prompts:
            label = f"{r.index}" + (f" ({r.prompt_id[:8]})" if r.prompt_id else "")
            p.add_row(label, fmt_ns(r.wall_ns), str(r.ran), str(r.cached), fmt_ns(r.node_ns),
                      f"{r.slowest} {fmt_ns(r.slowest_ns)}" if r.slowest else "")
        console.print(p)
