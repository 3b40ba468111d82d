"""Per-run plots of a benchmark (matplotlib, Agg): every timed run as a point, the median as a bar with
its 95% CI, each configuration's verdict and change CI against the baseline written above it, what was
measured (model, size, steps, dtype, device) as the figure's title; one panel per batch size when the
batch varies (the seed's per-GPU, per-batch charts). A ``stepscope try`` benchmark (kind "try"): two panels,
the denoising step and the whole call, per configuration against the baseline's median (a dashed line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .results import Verdict
from .stats import Change, ConfigStats


@dataclass(frozen=True, slots=True)
class Bar:
    """One configuration in a panel: its label, statistics and timed values (s), change against the baseline."""

    label: str
    stats: ConfigStats
    times_s: list[float]
    change: Change | None
    is_baseline: bool


def _panel(ax, bars: list[Bar], ylabel: str, title: str, scale: float = 1.0, baseline_line: bool = False) -> None:
    """Draw ``bars`` on ``ax``: values times ``scale`` (1e3: ms); ``baseline_line``: the baseline's median across."""
    for k, r in enumerate(bars):
        s = r.stats
        med = scale * s.median
        ax.bar(k, med, color="#9fc5e8" if not r.is_baseline else "#b6d7a8", width=0.6, zorder=1)
        ax.errorbar([k], [med], yerr=[[med - scale * s.ci_low], [scale * s.ci_high - med]], fmt="none", ecolor="#c62828",
                    elinewidth=1.5, capsize=6, zorder=3)  # 95% CI of the median
        ax.scatter([k] * len(r.times_s), [scale * t for t in r.times_s], color="#1d2330", s=14, zorder=2)
        if r.is_baseline:
            text = "baseline"
            if baseline_line:
                ax.axhline(med, color="#38761d", linestyle="--", linewidth=1, zorder=0)
        elif r.change is not None:
            c = r.change
            word = ("faster" if c.change < 0 else "slower") if c.significant else "no significant\ndifference"
            text = f"{word}\n{100 * c.change:+.1f}% (CI {100 * c.ci_low:+.1f}..{100 * c.ci_high:+.1f}%)"
        else:
            text = ""
        if text:
            ax.annotate(text, (k, scale * s.ci_high), ha="center", va="bottom", fontsize=7, xytext=(0, 4),
                        textcoords="offset points", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
                        color="#1d2330" if r.is_baseline or (r.change and r.change.significant) else "#666")
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([r.label.replace(" ", "\n") for r in bars], fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.margins(y=0.25)
    ax.grid(axis="y", alpha=0.3)


def _figure(n_panels: int, n_bars: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, plt.subplots(1, n_panels, figsize=(max(5, 1.6 * n_bars) * n_panels / 1.2, 4), squeeze=False)


def _save(plt, fig, path: str | Path, caption: str) -> Path:
    if caption:
        import textwrap

        width_chars = int(fig.get_size_inches()[0] * 14)
        fig.suptitle("\n".join(textwrap.wrap(caption, width_chars)), fontsize=8)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def plot(v: Verdict, path: str | Path, title: str = "") -> Path:
    """Write the PNG of the whole-call times (s); returns its path."""
    rows = [r for r in v.rows if r.times_s and r.stats is not None]
    batches = sorted({r.config.get("batch") for r in rows}, key=lambda x: (x is None, x))
    groups = [[r for r in rows if r.config.get("batch") == b] for b in batches] if len(batches) > 1 else [rows]
    plt, (fig, axes) = _figure(len(groups), max(len(g) for g in groups))
    for ax, group, b in zip(axes[0], groups, batches if len(batches) > 1 else [None]):
        _panel(ax, [Bar(r.label, r.stats, r.times_s, r.change, r.is_baseline) for r in group], "wall time per run (s)",
               f"batch {b}" if b is not None else (title or v.bench_id))
    return _save(plt, fig, path, v.measured + " · bars: median, red: its 95% CI, dots: runs" if v.measured else "")


def plot_try(tv, path: str | Path) -> Path:
    """Write the PNG of a ``stepscope try`` verdict (``fixes.verdict.TryVerdict``): per configuration the denoising
    step (ms; a dot per timed call: its mean step) and the whole call (s; a dot per call), median bars with their
    95% CI, the change against the baseline (its median dashed) with its CI; returns its path."""
    steps = [Bar(r.label, r.step, r.step_times, r.step_change, r.index == 0) for r in tv.rows if r.step is not None]
    calls = [Bar(r.label, r.call, r.call_times, r.call_change, r.index == 0) for r in tv.rows if r.call is not None]
    panels = [p for p in ((steps, "a denoising step (ms)", 1e3), (calls, "the pipeline call (s)", 1.0)) if p[0]]
    plt, (fig, axes) = _figure(len(panels), max(len(p[0]) for p in panels))
    for ax, (bars, what, scale) in zip(axes[0], panels):
        _panel(ax, bars, what, what + " per configuration", scale, baseline_line=True)
    caption = " · ".join(filter(None, [f"stepscope try {tv.bench_id}", tv.measured, "bars: median, red: its 95% CI, "
                                       "dots: timed calls, dashed: the baseline's median", tv.recommendation]))
    return _save(plt, fig, path, caption)
