"""Per-run plots of a benchmark (matplotlib, Agg): every timed run as a point, the median as a bar,
one panel per batch size when the batch varies (the seed's per-GPU, per-batch charts)."""

from __future__ import annotations

from pathlib import Path

from .results import Verdict


def plot(v: Verdict, path: str | Path, title: str = "") -> Path:
    """Write the PNG; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in v.rows if r.times_s]
    batches = sorted({r.config.get("batch") for r in rows}, key=lambda x: (x is None, x))
    groups = [[r for r in rows if r.config.get("batch") == b] for b in batches] if len(batches) > 1 else [rows]
    fig, axes = plt.subplots(1, len(groups), figsize=(max(5, 1.6 * max(len(g) for g in groups)) * len(groups) / 1.2, 4),
                             squeeze=False)
    for ax, group, b in zip(axes[0], groups, batches if len(batches) > 1 else [None]):
        for k, r in enumerate(group):
            ax.bar(k, r.stats.median, color="#9fc5e8" if not r.is_baseline else "#b6d7a8", width=0.6, zorder=1)
            ax.scatter([k] * len(r.times_s), r.times_s, color="#1d2330", s=14, zorder=2)
            if r.change is not None:
                ax.annotate(f"{100 * r.change.change:+.1f}%", (k, r.stats.median), ha="center", va="bottom", fontsize=8,
                            xytext=(0, 3), textcoords="offset points")
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([r.label.replace(" ", "\n") for r in group], fontsize=7)
        ax.set_ylabel("wall time per run (s)")
        ax.set_title(f"batch {b}" if b is not None else (title or v.bench_id), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p
