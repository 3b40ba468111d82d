"""Per-run plots of a benchmark (matplotlib, Agg): every timed run as a point, the median as a bar with
its 95% CI, each configuration's verdict and change CI against the baseline written above it, what was
measured (model, size, steps, dtype, device) as the figure's title; one panel per batch size when the
batch varies (the seed's per-GPU, per-batch charts)."""

from __future__ import annotations

from pathlib import Path

from .results import Verdict


def plot(v: Verdict, path: str | Path, title: str = "") -> Path:
    """Write the PNG; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in v.rows if r.times_s and r.stats is not None]
    batches = sorted({r.config.get("batch") for r in rows}, key=lambda x: (x is None, x))
    groups = [[r for r in rows if r.config.get("batch") == b] for b in batches] if len(batches) > 1 else [rows]
    fig, axes = plt.subplots(1, len(groups), figsize=(max(5, 1.6 * max(len(g) for g in groups)) * len(groups) / 1.2, 4),
                             squeeze=False)
    for ax, group, b in zip(axes[0], groups, batches if len(batches) > 1 else [None]):
        for k, r in enumerate(group):
            s = r.stats
            ax.bar(k, s.median, color="#9fc5e8" if not r.is_baseline else "#b6d7a8", width=0.6, zorder=1)
            ax.errorbar([k], [s.median], yerr=[[s.median - s.ci_low], [s.ci_high - s.median]], fmt="none", ecolor="#c62828",
                        elinewidth=1.5, capsize=6, zorder=3)  # 95% CI of the median
            ax.scatter([k] * len(r.times_s), r.times_s, color="#1d2330", s=14, zorder=2)
            if r.is_baseline:
                text = "baseline"
            elif r.change is not None:
                c = r.change
                word = ("faster" if c.change < 0 else "slower") if c.significant else "no significant\ndifference"
                text = f"{word}\n{100 * c.change:+.1f}% (CI {100 * c.ci_low:+.1f}..{100 * c.ci_high:+.1f}%)"
            else:
                text = ""
            if text:
                ax.annotate(text, (k, s.ci_high), ha="center", va="bottom", fontsize=7, xytext=(0, 4), textcoords="offset points",
                            color="#1d2330" if r.is_baseline or (r.change and r.change.significant) else "#666")
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([r.label.replace(" ", "\n") for r in group], fontsize=7)
        ax.set_ylabel("wall time per run (s)")
        ax.set_title(f"batch {b}" if b is not None else (title or v.bench_id), fontsize=9)
        ax.margins(y=0.25)
        ax.grid(axis="y", alpha=0.3)
    if v.measured:
        import textwrap

        width_chars = int(fig.get_size_inches()[0] * 14)
        fig.suptitle("\n".join(textwrap.wrap(v.measured + " · bars: median, red: its 95% CI, dots: runs", width_chars)),
                     fontsize=8)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p
