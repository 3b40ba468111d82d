"""The memory part of the run summary in the terminal (``analysis.memory``): peaks, the largest stage, memory by
stage and by span name, and the out-of-memory record."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ...analysis.memlane import WindowMemory
from ...analysis.memory import MemorySummary
from ...core.units import fmt_bytes, fmt_ns
from .cells import left_short, name_room, num_col, short_name


def _fig(w: WindowMemory | None, what: str) -> str:
    if w is None:
        return "-"
    v = getattr(w, what)
    if v is None:
        return "-"
    exact = {"entry": w.exact_entry, "exit": w.exact_exit, "peak": w.exact_peak, "growth": w.exact_peak}[what]
    return ("+" if what == "growth" else "") + fmt_bytes(v) + ("" if exact else "~")


def oom_lines(oom: dict) -> list[str]:
    """The out-of-memory record in words (also used by the report's tests)."""
    where = oom.get("span")
    step = oom.get("step")
    head = ("killed by SIGKILL" + (" (the kernel's OOM killer)" if "OOM killer" in (oom.get("error") or "")
                                   else " (out of memory?)") if oom["how"] == "killed"
            else f"out of memory: {oom.get('error')}")
    if where:
        head += f" in {short_name(where, 3)}" + (" (still open when the process died)" if oom.get("open") else "")
    if step is not None:
        head += f", step {step}"
    elif oom.get("after_step") is not None:
        head += f", after step {oom['after_step']}"
    lines = [head]
    if oom.get("message"):
        lines.append(oom["message"])
    m = oom.get("memory") or {}
    parts = [f"{label} {fmt_bytes(m[k])}" for k, label in (("rss", "RSS"), ("rss_peak", "peak RSS"),
                                                          ("cuda_allocated", "CUDA allocated"),
                                                          ("cuda_reserved", "CUDA reserved"), ("cuda_peak", "CUDA peak"))
             if m.get(k) is not None]
    if parts:
        lines.append("memory at the time: " + ", ".join(parts) + (" (last sample)" if "sampled_at_us" in m else ""))
    snap = oom.get("snapshot")
    if snap and snap.get("largest"):
        b = snap["largest"][0]
        lines.append(f"largest live block {fmt_bytes(b['size'])} allocated at {b.get('where') or '(no Python stack)'}"
                     f"; {snap.get('active_blocks', 0)} live blocks, {fmt_bytes(snap.get('active_bytes'))} in all")
    return lines


def print_memory(m: MemorySummary | None, console: Console, max_stages: int = 30) -> None:
    """Memory peaks, stages (steps and the spans around them), span names by growth; "~" marks sampled figures."""
    if m is None:
        return
    if m.oom is not None:
        lines = oom_lines(m.oom)
        console.print(f"[bold red]{escape(lines[0])}[/bold red]")
        for ln in lines[1:]:
            console.print(f"  {escape(ln)}")
    if not m.samples:
        return
    parts = []
    if m.peak_rss is not None:
        parts.append(f"peak RSS {fmt_bytes(m.peak_rss)}")
    if m.peak_cuda is not None:
        parts.append(f"CUDA peak allocated {fmt_bytes(m.peak_cuda)}")
    if m.peak_reserved is not None:
        parts.append(f"reserved {fmt_bytes(m.peak_reserved)}")
    line = "[bold]Memory[/bold]: " + ", ".join(parts) + f"  ({m.samples} samples, every {fmt_ns(m.period_ns)})"
    console.print(line)
    if m.largest is not None:
        g = m.largest
        w = g.measure()
        console.print(f"largest stage of memory: [bold]{escape(g.label)}[/bold] peak {_fig(w, 'peak')}, "
                      f"{_fig(w, 'growth')} on top of {_fig(w, 'entry')} at its start")
    stages = m.stages
    if stages:
        if len(stages) > max_stages:  # the spans, and the steps that grew most
            steps = sorted((g for g in stages if g.kind == "step"), key=lambda g: -(g.growth() or 0))[:max_stages // 2]
            keep = {id(g) for g in stages if g.kind != "step"} | {id(g) for g in steps}
            stages = [g for g in stages if id(g) in keep]
        use_cuda = any(g.cuda is not None for g in stages)
        t = Table(title="Memory by stage (" + ("CUDA allocated" if use_cuda else "RSS") + "; ~ sampled)",
                  title_justify="left", show_edge=False)
        t.add_column("stage", overflow="fold", ratio=1, min_width=12)
        ws = [(g.cuda if use_cuda and g.cuda is not None else g.rss) for g in stages]
        cols = {k: [_fig(w, k) for w in ws] for k in ("entry", "peak", "growth", "exit")}
        for k, v in cols.items():
            num_col(t, k, v)
        t.add_column("note", style="dim", overflow="fold")
        for g, w, *cells in zip(stages, ws, *cols.values()):
            t.add_row(Text(g.label, style="bold" if g is m.largest else ""), *cells, Text(w.note or ""))
        console.print(t)
    if m.spans:
        rows = m.spans[:10]
        t = Table(title="Memory by span (the call that grew most)", title_justify="left", show_edge=False)
        t.add_column("name", overflow="fold", ratio=1, min_width=20)
        vals = [[str(r.calls), fmt_bytes(r.growth) if r.growth is not None else "-",
                 fmt_bytes(r.peak) if r.peak is not None else "-", str(r.unsampled) if r.unsampled else ""] for r in rows]
        for k, h in enumerate(("calls", "growth", "peak", "too short")):
            num_col(t, h, [v[k] for v in vals])
        room = name_room(console, t)
        for r, v in zip(rows, vals):
            t.add_row(Text(left_short(r.name, room)), *v)
        console.print(t)
