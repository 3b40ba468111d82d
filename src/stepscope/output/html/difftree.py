"""The colour of a node of the differential call tree (``analysis.difftree.DiffNode``) on the HTML pages: one
formula for the compare page's flame graph (``output/html/compare.py``) and the explain section's (``view.py`` gives
each node its colour; ``static/verdict.js`` paints it).

The colour is the node's own change relative to its width: ``r = (B - A) / (A + B)``, from -1 (only in A: it
vanished, or ran only in the fast repeats) to +1 (only in B: it appeared, or ran only in the slow repeats);
white to red for more time in B, white to blue for less, in proportion to ``|r|``."""

from __future__ import annotations


def diff_color(a_ns: float, b_ns: float) -> str:
    """An ``rgb()`` string for a node's times per repeat on side A and side B (ns, or any one unit)."""
    mean = (a_ns + b_ns) / 2 or 1.0
    r = max(-1.0, min(1.0, (b_ns - a_ns) / (2 * mean)))  # -1 (vanished) .. +1 (appeared)
    if r >= 0:  # white -> red
        return f"rgb(255,{int(235 - 175 * r)},{int(225 - 185 * r)})"
    r = -r
    return f"rgb({int(225 - 185 * r)},{int(235 - 120 * r)},255)"
