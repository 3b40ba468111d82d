"""The differential call tree (``analysis.difftree.DiffNode``) in the terminal, for ``stepscope explain`` (slow
repeats against fast ones) and ``stepscope diff`` (run B against run A)."""

from __future__ import annotations

from collections.abc import Callable

from rich.markup import escape
from rich.tree import Tree

from ...analysis.difftree import DiffNode
from ...core.units import fmt_ns
from .cells import short_name


def signed_ns(ns: float) -> str:
    """``+1.2 ms`` / ``-345 us``: a change in ns with its sign."""
    return ("+" if ns >= 0 else "-") + fmt_ns(abs(ns))


def tree_view(root: DiffNode, title: str, depth: int, limit: float, shown: Callable[[DiffNode], bool],
              b_first: bool = False, fold: bool = False) -> Tree:
    """The tree under ``root`` as a ``rich`` tree titled ``title``, one line per node: name, the two times per
    repeat (A / B, or B / A with ``b_first``) and the change (B - A), red where it is over ``limit`` (ns), green
    where under ``-limit``, dim between. Only the children for which ``shown`` is true, down to ``depth`` levels;
    ``fold``: a chain of single shown children whose change stays within ``limit`` of the first's is one line
    (``a > … > z``, the last one's times)."""
    out = Tree(title)

    def kids(node: DiffNode) -> list[DiffNode]:
        return [c for c in node.children if shown(c)]

    def add(node: DiffNode, branch: Tree, d: int) -> None:
        for c in kids(node):
            chain = [c]
            while fold and len(kids(chain[-1])) == 1 and abs(kids(chain[-1])[0].delta_ns - chain[-1].delta_ns) < limit:
                chain.append(kids(chain[-1])[0])
            last = chain[-1]
            name = short_name(c.name, 3) if len(chain) == 1 else (
                f"{short_name(c.name, 2)} > … > {short_name(last.name, 3)}" if len(chain) > 2
                else f"{short_name(c.name, 2)} > {short_name(last.name, 3)}")
            style = "red" if last.delta_ns > limit else "green" if last.delta_ns < -limit else "dim"
            first, second = (last.b_ns, last.a_ns) if b_first else (last.a_ns, last.b_ns)
            b = branch.add(f"[{style}]{escape(name)}  {fmt_ns(first)} / {fmt_ns(second)}  {signed_ns(last.delta_ns)}[/{style}]")
            if d < depth:
                add(last, b, d + 1)

    add(root, out, 0)
    return out
