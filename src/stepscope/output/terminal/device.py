"""Terminal rendering of a device analysis."""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table

from ...device.analysis import DeviceSummary
from ...device.runview import RunDevice
from ...core.units import fmt_ns
from ...device.names import kernel_label
from .cells import short_name


def share(x: float | None) -> str:
    """A share (0..1) as a percentage cell: whole percent from 1%, one decimal below (``0.3%``), ``<0.1%``."""
    if x is None:
        return "-"
    p = 100 * x
    return f"{p:.0f}%" if p >= 1 or p == 0 else f"{p:.1f}%" if p >= 0.1 else "<0.1%"


def _clip(s: str | None, n: int = 70) -> str:
    """A text cell: never cut (the table folds long text onto more lines); ``n`` is kept for callers."""
    return s or "-"


def _text_col(t: Table, col: str, **kw) -> None:
    """A text column that folds long values onto more lines instead of cutting them."""
    t.add_column(col, justify="left", overflow="fold", **kw)


def device_words(d: DeviceSummary) -> str:
    """What the trace says of its device, as the header says it: ``device NAME`` (``deviceProperties``); without a
    name, what its kernels show (``GPU kernels on 5 streams, device unnamed``: a trace written without device
    properties, as a job's rank traces can be); ``device CPU only`` when no device stream ran."""
    if d.device:
        return f"device {d.device}"
    streams = {(s.device, s.stream) for s in d.streams}
    if not streams and not d.top_kernels:
        return "device CPU only"
    devices = {dev for dev, _ in streams}
    n = len(streams)
    on = f"{len(devices)} devices, {n} streams" if len(devices) > 1 else f"{n} stream{'s' if n != 1 else ''}"
    return (f"GPU kernels on {on}, device{'s' if len(devices) > 1 else ''} unnamed" if n
            else "GPU kernels, device unnamed")


def print_device(d: DeviceSummary, console: Console, top: int = 10) -> None:
    """One device trace's summary (``device.analysis.summarize``) as the terminal shows it."""
    console.print(f"[bold]device trace[/bold] {d.path}  {device_words(d)}  {d.events} events  "
                  f"span {fmt_ns(d.span_ns)}")
    if d.streams:
        t = Table(title="Idle time per stream (HTA's categories)", title_justify="left", show_edge=False)
        for col in ("device", "stream", "activities", "span", "busy", "idle", "host wait", "kernel wait", "other"):
            t.add_column(col, justify="right", no_wrap=True)
        for s in d.streams:
            idle = max(s.idle_ns, 1)
            t.add_row(str(s.device), str(s.stream), str(s.activities), fmt_ns(s.span_ns), fmt_ns(s.busy_ns),
                      f"{fmt_ns(s.idle_ns)} ({100 * s.idle_share:.0f}%)",
                      f"{fmt_ns(s.host_wait_ns)} ({100 * s.host_wait_ns / idle:.0f}%)",
                      f"{fmt_ns(s.kernel_wait_ns)} ({100 * s.kernel_wait_ns / idle:.0f}%)",
                      f"{fmt_ns(s.other_ns)} ({100 * s.other_ns / idle:.0f}%)")
        console.print(t)
        t = Table(title="Largest idle gaps", title_justify="left", show_edge=False)
        for col in ("gap", "stream", "category", "host op running", "annotation / span", "next on device"):
            if col in ("gap", "stream"):
                t.add_column(col, justify="right", no_wrap=True)
            else:
                _text_col(t, col)
        for g in d.gaps[:top]:
            t.add_row(fmt_ns(g.duration_ns), str(g.stream), g.category, _clip(g.host_op, 30), _clip(g.annotation, 40),
                      (kernel_label(g.next_name or "") or "-")
                      + (f" (launched in {g.launched_in})" if g.launched_in else ""))
        console.print(t)
    if d.syncs:
        t = Table(title=f"Host-device syncs ({', '.join(f'{v} {k}' for k, v in d.sync_counts.items())})",
                  title_justify="left", show_edge=False)
        for col in ("kind", "cost", "inside op", "annotation / span", "python"):
            if col in ("kind", "cost"):
                t.add_column(col, justify="right" if col == "cost" else "left", no_wrap=True)
            else:
                _text_col(t, col)
        for s in sorted(d.syncs, key=lambda s: -s.cost_ns)[:top]:
            t.add_row(s.kind, fmt_ns(s.cost_ns), _clip(s.enclosing_op, 30), _clip(s.annotation, 40), _clip(s.python, 50))
        console.print(t)
    else:
        console.print("No host-device syncs.")
    for title, items in (("Top host ops by self time", d.top_ops), ("Top kernels by time", d.top_kernels)):
        if not items:
            continue
        t = Table(title=title, title_justify="left", show_edge=False)
        for col in ("name", "calls", "total", "self"):
            if col == "name":
                _text_col(t, col)
            else:
                t.add_column(col, justify="right", no_wrap=True)
        label = kernel_label if items is d.top_kernels else _clip
        for o in items[:top]:
            t.add_row(label(o.name), str(o.count), fmt_ns(o.total_ns), fmt_ns(o.self_ns))
        console.print(t)


def print_run_device(v: RunDevice, console: Console, top: int = 10, xla: bool = False) -> None:
    """A run's device view: the trace summary, per-span host vs device time, the sync sites. ``xla``: the
    run's XLA trace was printed already (no Kineto trace is expected)."""
    if v.summary is None and xla:
        pass
    elif v.summary is not None:
        print_device(v.summary, console, top)
        if v.spans:
            t = Table(title="Per span: host time vs host ops vs device", title_justify="left", show_edge=False)
            peak = (v.peak or {}).get("peak_flops")
            if peak:
                peaks = v.peak.get("peaks") or {v.peak.get("dtype"): peak}
                console.print(f"measured matmul peak ({v.peak.get('name')}): "
                              + ", ".join(f"{d} {p / 1e12:.1f} TFLOP/s" if p >= 1e12 else f"{d} {p / 1e9:.1f} GFLOP/s"
                                          for d, p in peaks.items())
                              + " (each span's share: of the peak of its ops' dtype)")
            for col in ("span", "calls", "in trace", "host (span)", "in host ops", "on device", "GFLOP", "GFLOP/s",
                        "of peak", "top kernels / ops"):
                num = col not in ("span", "top kernels / ops")
                if num:
                    t.add_column(col, justify="right", no_wrap=True, min_width=len(col))
                else:
                    _text_col(t, col, min_width=20)
            for s in v.spans[:top]:
                t.add_row(short_name(s.name), str(s.count), str(s.recorded), fmt_ns(s.recorded_ns), fmt_ns(s.op_ns), fmt_ns(s.device_ns),
                          f"{s.flops / 1e9:.2f}", f"{s.achieved_flops_s / 1e9:.1f}",
                          share(s.of_peak) + (f" ({share(s.device_of_peak)} on device)" if s.device_of_peak else ""),
                          ", ".join(f"{kernel_label(n)} {fmt_ns(ns)}" for n, ns in (s.top_kernels or s.top_ops)[:3]))
            console.print(t)
    else:
        console.print("[dim]no device trace for this run (record with --device-trace; where torch_xla is installed, "
                      "the XLA profiler starts when the program imports torch_xla)[/dim]")
    if v.compile is not None:
        gb, rc = v.compile.get("graph_breaks", []), v.compile.get("recompiles", [])
        console.print(f"[bold]torch.compile[/bold]: {sum(g['count'] for g in gb)} graph breaks at {len(gb)} places, "
                      f"{sum(r['count'] for r in rc)} recompilations")
        for title, items in (("Graph breaks", gb), ("Recompilations", rc)):
            if not items:
                continue
            t = Table(title=title, title_justify="left", show_edge=False)
            for col in ("where", "count", "reason"):
                if col == "count":
                    t.add_column(col, justify="right", no_wrap=True)
                else:
                    _text_col(t, col, min_width=8 if col != "reason" else 30)
            for g in items[:top]:
                t.add_row(f"{os.path.basename(g['file'])}:{g['line']}" + (f" {g['function']}" if g.get("function") else ""),
                          str(g["count"]), g["reason"])
            console.print(t)
    if v.sync_sites:
        t = Table(title="Sync sites (where a GPU would make the host wait)", title_justify="left", show_edge=False)
        for col in ("kind", "line", "function", "calls", "time", "inside"):
            if col in ("calls", "time", "kind"):
                t.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True,
                             min_width={"kind": 11, "calls": 5, "time": 8}[col])
            else:
                _text_col(t, col, min_width=12)
        for s in v.sync_sites[:top]:
            t.add_row(s.kind, s.where, s.function, str(s.count), fmt_ns(s.total_ns), ", ".join(short_name(n) for n in s.inside[:2]))
        console.print(t)


#: torch_xla counters worth a per-step column (the rest are in --json): compilations, executions, step
#: markers, and the aten:: counters (ops that ran on the CPU, e.g. each .item() is aten::_local_scalar_dense).
_XLA_COUNTERS = ("UncachedCompile", "CachedCompile", "ExecuteComputation", "MarkStep")
_XLA_TIMES = ("CompileTime", "ExecuteTime", "TransferFromDeviceTime", "TransferToDeviceTime")


def _steps_text(steps: list[str], n: int = 6) -> str:
    if not steps:
        return "-"
    return ", ".join(steps[:n]) + (f" +{len(steps) - n}" if len(steps) > n else "")


def xla_metrics_text(m: dict) -> str:
    """One step's torch_xla metrics changes as a short line: the main counters, the aten:: ones, and the
    time metrics as "name count (time)"."""
    parts = [f"{k} {int(m[k])}" for k in _XLA_COUNTERS if m.get(k)]
    parts += [f"{k} {int(v)}" for k, v in m.items() if k.startswith("aten::") and v]
    parts += [f"{k} {int(m.get(k + '.count', 0))} ({fmt_ns(int(m[k]))})" for k in _XLA_TIMES if m.get(k + ".count")]
    return ", ".join(parts) or "-"


def print_xla(x, console: Console, top: int = 10) -> None:
    """A PyTorch/XLA trace's report (``device.xla.XlaSummary``): totals, per step, transfers with their
    Python line, per span, device lanes and idle gaps, the metrics per step."""
    t = x.total
    console.print(f"[bold]XLA trace[/bold] {x.path}  {x.hosts} host file{'s' if x.hosts != 1 else ''}  {x.events} events  "
                  f"span {fmt_ns(x.span_ns)}")
    console.print(f"graph compilations: {t.compiles} ({fmt_ns(t.compile_ns)}) of {x.graphs} graphs, "
                  f"{x.recompiles} recompilations after a call's first step; graph executions: {t.executions} "
                  f"({fmt_ns(t.execute_ns)}), {t.reads} cut by a tensor read; transfers: {t.from_device} from device "
                  f"({fmt_ns(t.from_device_ns)}), {t.to_device} to device ({fmt_ns(t.to_device_ns)})")
    if x.metrics_error:
        console.print(f"[yellow]{x.metrics_error}[/yellow]")
    for name, why in x.unmirrored.items():
        console.print(f"[cyan]unmirrored:[/cyan] {short_name(name)}: {why}")
    if x.steps:
        tb = Table(title=f"Per step ({x.step_source}; graphs run: executions, cut by reads: of them forced by a "
                         "tensor read; host between: wall time with no graph executing)", title_justify="left",
                   show_edge=False)
        for col in ("step", "graphs run", "cut by reads", "compiles", "recompiles", "compile", "execute",
                    "from device", "to device", "host between", "wall"):
            tb.add_column(col, justify="left" if col == "step" else "right", no_wrap=True, min_width=len(col))
        for s in x.steps[: max(top, 30)]:
            f = s.figures
            tb.add_row(s.label, str(f.executions), str(f.reads), str(f.compiles), str(s.recompiles), fmt_ns(f.compile_ns),
                       fmt_ns(f.execute_ns), f"{f.from_device} ({fmt_ns(f.from_device_ns)})",
                       f"{f.to_device} ({fmt_ns(f.to_device_ns)})",
                       fmt_ns(f.host_ns) if s.end_ns > s.start_ns else "-", fmt_ns(f.wall_ns) if s.end_ns > s.start_ns else "-")
        console.print(tb)
    if x.transfers:
        tb = Table(title="Transfers and the Python line that caused them", title_justify="left", show_edge=False)
        for col in ("direction", "kind", "line", "function", "count", "transfer", "wait", "steps", "inside"):
            num = col in ("count", "transfer", "wait")
            tb.add_column(col, justify="right" if num else "left", no_wrap=True, overflow="ellipsis",
                          min_width={"direction": 11, "kind": 11, "line": 32, "count": 5, "transfer": 8, "wait": 8,
                                     "steps": 7, "function": 16, "inside": 12}.get(col),
                          max_width={"function": 40, "inside": 36, "steps": 18}.get(col))
        for s in x.transfers[:top]:
            tb.add_row(s.direction, s.kind or "-", s.where or "-", s.function or "-", str(s.count), fmt_ns(s.cost_ns),
                       fmt_ns(s.wait_ns) if s.wait_ns else "-", _steps_text(s.steps),
                       ", ".join(short_name(n) for n in s.inside[:2]) or "-")
        console.print(tb)
    else:
        console.print("No transfers between host and device.")
    if x.spans:
        tb = Table(title="Per span", title_justify="left", show_edge=False)
        for col in ("span", "calls", "wall", "host", "compiles", "compile", "graphs run", "cut by reads", "from device",
                    "to device"):
            tb.add_column(col, justify="left" if col == "span" else "right", no_wrap=True, overflow="ellipsis",
                          max_width=50 if col == "span" else None)
        for s in x.spans[:top]:
            f = s.figures
            tb.add_row(short_name(s.name), str(s.calls), fmt_ns(f.wall_ns), fmt_ns(f.host_ns), str(f.compiles),
                       fmt_ns(f.compile_ns), str(f.executions), str(f.reads), f"{f.from_device} ({fmt_ns(f.from_device_ns)})",
                       f"{f.to_device} ({fmt_ns(f.to_device_ns)})")
        console.print(tb)
    if x.lanes:
        tb = Table(title="Device lanes", title_justify="left", show_edge=False)
        for col in ("lane", "activities", "span", "busy", "idle"):
            tb.add_column(col, justify="left" if col == "lane" else "right", no_wrap=True)
        for ln in x.lanes:
            tb.add_row(ln.lane, str(ln.activities), fmt_ns(ln.span_ns), fmt_ns(ln.busy_ns),
                       f"{fmt_ns(ln.idle_ns)} ({100 * ln.idle_ns / max(ln.span_ns, 1):.0f}%)")
        console.print(tb)
        if x.gaps:
            tb = Table(title="Largest device idle gaps and the host span running", title_justify="left", show_edge=False)
            for col in ("gap", "lane", "step", "host span"):
                tb.add_column(col, justify="right" if col == "gap" else "left", no_wrap=True, overflow="ellipsis")
            for g in x.gaps[:top]:
                tb.add_row(fmt_ns(g.duration_ns), g.lane, g.step or "-", short_name(g.span) if g.span else "-")
            console.print(tb)
    if any(s.metrics for s in x.steps):
        tb = Table(title="torch_xla metrics per step (torch_xla.debug.metrics; all counters in --json)",
                   title_justify="left", show_edge=False)
        tb.add_column("step", no_wrap=True)
        tb.add_column("counters and times", overflow="fold")
        for s in x.steps[: max(top, 30)]:
            if s.metrics:
                tb.add_row(s.label, xla_metrics_text(s.metrics))
        console.print(tb)


def print_ranks_device(r, console: Console) -> None:
    """A job's device time rank by rank (``device.ranks.RanksDevice``): busy, idle, computation, communication and
    their overlap, as HTA's temporal breakdown and communication/computation overlap define them."""
    t = Table(title="Device time by rank (complete profiler steps; HTA's temporal breakdown and comm/comp overlap)",
              title_justify="left", show_edge=False)
    for col in ("rank", "trace", "kernels", "span", "idle", "compute", "non-compute", "communication", "overlap"):
        t.add_column(col, justify="left" if col == "trace" else "right", no_wrap=col != "trace")
    pct = lambda a, b: f" ({100 * a / b:.1f}%)" if b else ""  # noqa: E731
    for x in r.ranks:
        t.add_row(str(x.rank), _clip(os.path.basename(x.label) or x.label, 40), f"{x.kernels:,}", fmt_ns(x.span_ns),
                  fmt_ns(x.idle_ns) + pct(x.idle_ns, x.span_ns), fmt_ns(x.compute_ns) + pct(x.compute_ns, x.span_ns),
                  fmt_ns(x.non_compute_ns) + pct(x.non_compute_ns, x.span_ns), fmt_ns(x.comm_ns),
                  "-" if x.overlap_share is None else f"{100 * x.overlap_share:.1f}%")
    console.print(t)
    if r.most_idle is not None:
        console.print(f"most idle: rank {r.most_idle}, least idle: rank {r.least_idle} "
                      f"({fmt_ns(r.idle_spread_ns)} apart); overlap: the share of communication time during which the "
                      "device also computed")
    for note in r.notes:
        console.print(f"[dim]{note}[/dim]")
