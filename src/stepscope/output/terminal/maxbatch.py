"""``stepscope bench sd --max-batch`` in the terminal and as a plot: every value tried, the largest that fits,
its peak memory and images/s, and the throughput curve up to it."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ...bench.maxbatch import MaxResult
from ...core.units import fmt_bytes
from .cells import num_col


def _what(r: MaxResult) -> str:
    c = r.config
    parts = [f"model {c.get('model')}", f"{c.get('steps')} steps", f"attention {c.get('attention')}", c.get("dtype") or ""]
    if r.dimension == "batch":
        from ...pipelines.sd import MODELS, default_size

        size = c.get("size") or (default_size(c.get("model")) if c.get("model") in MODELS else None)
        parts.insert(1, f"{size or 'default'} px")
    else:
        parts.insert(1, f"batch {c.get('batch')}")
    return ", ".join(p for p in parts if p)


def print_max(r: MaxResult, console: Console) -> None:
    """The probes in value order (fits or why not), then the verdict line."""
    dim = r.dimension
    budget = f"{fmt_bytes(r.limit_bytes)} of address space per worker (RLIMIT_AS)" if r.limit_bytes else "the device's memory"
    t = Table(title=f"Largest {dim} that fits: {_what(r)}; budget {budget}", title_justify="left", show_edge=False)
    probes = sorted(r.probes, key=lambda p: p.value)
    cells = [[str(p.value), "yes" if p.fits else "no", f"{p.wall_s:.3f} s" if p.wall_s else "-",
              f"{p.images_s:.3f}" if p.images_s else "-", fmt_bytes(p.peak_bytes), fmt_bytes(p.vm_peak_bytes)]
             for p in probes]
    for k, h in enumerate((dim if dim == "batch" else "size (px)", "fits", "wall (median)", "images/s", "peak memory",
                           "address space")):
        num_col(t, h, [c[k] for c in cells])
    t.add_column("why not", overflow="fold", ratio=1)
    for p, c in zip(probes, cells):
        t.add_row(*c, Text((p.error or "")[:160]), style="" if p.fits else "dim")
    console.print(t)
    b = r.best_probe
    if b is None:
        console.print(f"[bold red]nothing fits[/bold red]: not even {dim} {probes[0].value if probes else '?'} "
                      f"({escape(probes[0].error or '') if probes else 'no probe ran'})")
    else:
        console.print(f"[bold]largest {dim} that fits: {b.value}[/bold]: peak memory {fmt_bytes(b.peak_bytes)}, "
                      f"{b.images_s:.3f} images/s ({b.wall_s:.3f} s a call)"
                      + (f"; {dim} {min(p.value for p in r.probes if not p.fits)} does not fit"
                         if any(not p.fits for p in r.probes) else f" (the ceiling: nothing larger was tried)"))
    if r.stopped:
        console.print(f"[yellow]stopped early: {escape(r.stopped)}[/yellow]")


def plot_curve(r: MaxResult, path: str | Path) -> Path | None:
    """images/s against the value for every value that fits (the largest marked), and the peak memory of each on a
    second axis; None when none fits."""
    curve = r.curve
    if not curve:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [p.value for p in curve]
    ax.plot(xs, [p.images_s for p in curve], "o-", color="#1565c0")
    b = r.best_probe
    if b is not None:
        ax.plot([b.value], [b.images_s], "o", color="#c62828", markersize=9, label=f"largest that fits: {b.value}")
        ax.legend(loc="best", fontsize=8)
    ax.set_xlabel(r.dimension if r.dimension == "batch" else "image size (px)")
    ax.set_ylabel("images/s", color="#1565c0")
    peaks = [(p.value, p.peak_bytes / (1 << 20)) for p in curve if p.peak_bytes]
    if peaks:  # the memory each value needed, on its own axis
        ax2 = ax.twinx()
        ax2.plot([v for v, _ in peaks], [m for _, m in peaks], "s--", color="#6a1b9a", alpha=0.6, markersize=4)
        ax2.set_ylabel("peak memory (MiB)", color="#6a1b9a")
    ax.set_title(f"{_what(r)}\nbudget {fmt_bytes(r.limit_bytes) if r.limit_bytes else 'device memory'}", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
