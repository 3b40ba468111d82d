"""The plot of a stored benchmark of either kind: ``stepscope bench`` (``bench.plots.plot``) or ``stepscope try``
(``bench.plots.plot_try`` of ``fixes.verdict.try_verdict``). It sits above both packages (matplotlib is loaded by
the plotting functions, on use)."""

from __future__ import annotations

from pathlib import Path

from ..bench.plots import plot, plot_try
from ..bench.results import verdict
from ..fixes.verdict import try_verdict


def plot_bench(b: dict, path: str | Path) -> Path | None:
    """The plot of a stored benchmark (``store.bench.load``'s dict): ``plot_try`` for kind "try", else ``plot``;
    None when it has no timed runs."""

    if (b.get("spec") or {}).get("kind") == "try":
        tv = try_verdict(b)
        return plot_try(tv, path) if any(r.call is not None for r in tv.rows) else None
    v = verdict(b)
    return plot(v, path) if any(r.times_s and r.stats is not None for r in v.rows) else None
