"""The compare page: a ``Diff`` (``analysis.diff``) as HTML, served by ``stepscope serve`` at ``/compare``
and written as a self-contained file by ``stepscope report RUN_B --against RUN_A``.

The differential flame graph is laid out here as rectangles (an icicle, callers on top): a node's width
is the mean of its time per repeat in A and in B (so widths add up: the children of a node never
overflow it, and frames that vanished or appeared both show), its colour the change, red where B spends
more, blue where it spends less, in proportion to the node's own width (``output.html.difftree.diff_color``).
Text reaches the page through the template's autoescaping only; positions are numbers formatted here.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from ...analysis.diff import Diff
from ...analysis.difftree import DiffNode
from ...core.units import fmt_ns_page as fmt_ns
from .difftree import diff_color
from .templating import env, ui_css

ROW_PX = 18
MIN_WIDTH = 0.001  # of the root: narrower frames are left out
MAX_DEPTH = 60


@dataclass(slots=True)
class Rect:
    """One frame of the differential flame graph: ``x``/``w`` as percentages of the root's width, ``depth``
    from the top, times per repeat (ns), ``color`` an ``rgb()`` string, ``title`` the hover text."""

    name: str
    x: float
    w: float
    depth: int
    a_ns: float
    b_ns: float
    color: str
    title: str


def flame_rects(root: DiffNode | None) -> tuple[list[Rect], int]:
    """The rectangles of the differential flame graph and its depth (rows)."""
    if root is None:
        return [], 0
    total = (root.a_ns + root.b_ns) / 2
    if total <= 0:
        return [], 0
    rects: list[Rect] = []
    depth_max = 0

    def walk(node: DiffNode, x: float, depth: int) -> None:
        nonlocal depth_max
        for c in node.children:
            w = (c.a_ns + c.b_ns) / 2 / total
            if w < MIN_WIDTH:
                continue
            d = c.b_ns - c.a_ns
            title = (f"{c.name}\nA {fmt_ns(c.a_ns)} · B {fmt_ns(c.b_ns)} per repeat · "
                     f"{'+' if d >= 0 else '-'}{fmt_ns(abs(d))}")
            rects.append(Rect(c.name, round(100 * x, 4), round(100 * w, 4), depth, c.a_ns, c.b_ns, diff_color(c.a_ns, c.b_ns), title))
            depth_max = max(depth_max, depth + 1)
            if depth + 1 < MAX_DEPTH:
                walk(c, x, depth + 1)
            x += w

    walk(root, 0.0, 0)
    return rects, depth_max


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _ci(tc) -> str:
    return f"{100 * tc.ci_low:+.1f}% to {100 * tc.ci_high:+.1f}%" if tc.ci_low is not None else "-"


def _signed(ns: float | None) -> str:
    return "-" if ns is None else ("+" if ns >= 0 else "-") + fmt_ns(abs(ns))


def _verdict(tc) -> str:
    return "no CI (< 3 repeats)" if tc.ci_low is None and tc.change is not None and not tc.only_in else tc.verdict


env.filters["pct"] = _pct
env.filters["verdict"] = _verdict
env.filters["signed_ns"] = _signed


def compare_page(d: Diff | None, runs: list[dict] | None = None, selected: tuple[str, str] = ("", ""),
                 span: str = "", error: str | None = None, standalone: bool = False) -> str:
    """The page. ``d``: the diff (None with ``error``: the message shown instead); ``runs``: the pickers'
    choices, ``[{"id", "label"}]`` (none in a standalone file); ``selected``: the runs picked (A, B);
    ``standalone``: CSS inlined, no site navigation or pickers (a file that opens offline)."""
    rects, depth = flame_rects(d.flame if d is not None else None)
    title = f"compare {d.run_a} → {d.run_b}" if d is not None else "compare runs"
    return env.get_template("compare.html.j2").render(
        title=title, d=d, runs=runs or [], selected=selected, span=span, error=error, rects=rects,
        flame_height=depth * ROW_PX, row_px=ROW_PX, ci=_ci, inline_css=Markup(ui_css()) if standalone else None,
        standalone=standalone)
