"""Rich tables for the terminal: the run summary (the list of runs: ``runs.py``; cells: ``cells.py``).

Numbers are never cut (columns as wide as their widest value; step columns that do not fit are counted); names
are shortened from the left keeping ``Class.method``, then folded. A capture window's header names the program,
its phases line says the time before the first traced call is the app idle or serving, and one line counts the
spans cut at the window's end.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ...analysis.phases import BEFORE_CAPTURE
from ...analysis.summary import Summary
from ...record.tracing.globs import is_note
from ...core.units import fmt_bytes, fmt_ns
from .cells import left_short, name_room, num_col
from .memory import print_memory
from ...core.steprules import STEP_ATTR

#: how the key of a glob's note on its members that cannot be traced ends (``tracing.patch``)
IN_PART = " (in part)"


def _column_label(name: str) -> str:
    """A step-table header: the class for a method (``UNet2DConditionModel``), else the function."""
    segs = name.split(".")
    if len(segs) >= 2 and segs[-1] in ("forward", "__call__", "step", "decode", "encode", "encode_prompt") and segs[-2][:1].isupper():
        return segs[-2] if segs[-1] in ("forward", "__call__") else f"{segs[-2]}.{segs[-1]}"
    return segs[-1]


def _where(file: str, line: int) -> str:
    if not file:
        return ""
    return f"{os.path.basename(file)}:{line}"


def print_summary(s: Summary, console: Console, top: int = 10) -> None:
    """The summary of one run, as ``stepscope run`` prints it. Numbers are never cut: names give way
    (shortened from the left, then folded)."""
    status = s.status if s.exit_code in (None, 0) else f"{s.status} (exit {s.exit_code})"
    spans = f"{s.span_count} spans" if s.spans else "no function traced"  # (the run's transactions not counted)
    if s.capture is not None:  # a window of a running program: name the program
        what = f" of {escape(s.app)}" if s.app else ""
        pid = f" (pid {s.capture['pid']})" if s.capture.get("pid") else ""
        console.print(f"[bold]stepscope capture {s.run_id}[/bold]{what}{pid}  window {fmt_ns(s.wall_ns)}  status {status}  "
                      f"{spans}  {s.sample_count} samples")
    else:
        console.print(f"[bold]stepscope run {s.run_id}[/bold]  wall {fmt_ns(s.wall_ns)}  status {status}  "
                      f"{spans}  {s.sample_count} samples")
    ph = s.phases
    work = "traced work" if ph is None or not ph.entry else "work"
    if ph is not None and ph.split and ph.capture:  # no start-up or shutdown in a window of a running program
        console.print(f"[dim]before {ph.work_from} {fmt_ns(ph.startup_ns)} ({BEFORE_CAPTURE}), {work} "
                      f"{fmt_ns(ph.work_ns)}, after the {work} {fmt_ns(ph.shutdown_ns)}; the tables below cover the "
                      f"{work}[/dim]")
    elif ph is not None and ph.split:
        console.print(f"[dim]start-up {fmt_ns(ph.startup_ns)} (imports, model building: before {ph.work_from}), "
                      f"{work} {fmt_ns(ph.work_ns)}, shutdown {fmt_ns(ph.shutdown_ns)}; the tables below cover the "
                      f"{work}[/dim]")
    elif ph is not None and ph.startup_sampled_ns > 0:
        console.print(f"[dim]imports {fmt_ns(ph.startup_sampled_ns)} (sampled) are "
                      f"{'set apart' if ph.capture else 'start-up'}: the tables below leave them out[/dim]")
    if s.cut_spans:
        console.print(cut_line(s.cut_spans))
    if s.processes:
        from .processes import print_processes, print_rank_steps

        print_processes(s.processes, console)
        print_rank_steps(s.ranks, console)
    if s.spans:
        rows = s.spans[: max(top, 12)]
        cells = [[fmt_ns(st.total_ns), fmt_ns(st.mean_ns), fmt_ns(st.p50_ns), fmt_ns(st.p95_ns), fmt_ns(st.max_ns),
                  f"{100 * st.share:.1f}%"] for st in rows]
        t = Table(title="Spans", title_justify="left", show_edge=False)
        t.add_column("name", overflow="fold", ratio=1, min_width=20)
        num_col(t, "count", [str(st.count) for st in rows])
        for k, col in enumerate(("total", "mean", "p50", "p95", "max", "share")):
            num_col(t, col, [c[k] for c in cells])
        room = name_room(console, t)
        for st, c in zip(rows, cells):
            name = Text(left_short(st.name, room))
            if st.errors:
                name.append(f" ({st.errors} errors)", style="red")
            t.add_row(name, str(st.count), *c)
        console.print(t)
    elif not s.unresolved:
        console.print("Name functions to trace with --trace (or `stepscope suggest` after this run).")
    if s.nodes is not None:
        from .nodes import print_nodes

        print_nodes(s.nodes, console)
    if s.steps is not None and s.steps.rows:
        print_steps(s.steps, console)
    if s.memory is not None:
        print_memory(s.memory, console)
    if s.sampling:
        console.print(f"[dim]{escape(s.sampling)}[/dim]")
    if s.top_self:
        if s.idle_ns > 0:
            console.print(f"[dim]running time only: {fmt_ns(s.idle_ns)} of waiting threads (sleeps, locks, queues, the event "
                          f"loop's select: their CPU clock did not move) left out, as py-spy does; the report's flame graph "
                          f"shows wall time with them[/dim]")
        for title, items, key in (("Top functions by self time (sampled, traced work)", s.top_self, "self"),
                                  ("Top functions by total time (sampled, traced work)", s.top_total, "total")):
            if ph is None or not ph.split:
                title = title.replace(", traced work", ", imports apart" if ph is not None and ph.startup_sampled_ns > 0
                                      else "")
            elif ph.entry:
                title = title.replace(", traced work", ", work")
            items = items[:top]
            vals = [fmt_ns(f.self_ns if key == "self" else f.total_ns) for f in items]
            shares = [f"{100 * (f.self_share if key == 'self' else f.total_share):.1f}%" for f in items]
            wheres = [_where(f.file, f.line) for f in items]
            t = Table(title=title, title_justify="left", show_edge=False)
            t.add_column("function", overflow="fold", ratio=2, min_width=20)
            num_col(t, key, vals)
            num_col(t, "share", shares)
            room = name_room(console, t, 40)
            wide = min(max((len(w) for w in wheres), default=5), max(room // 2 - 3, 12))
            t.add_column("where", style="dim", overflow="fold", min_width=wide, max_width=wide)
            for f, v, sh, w in zip(items, vals, shares, wheres):
                t.add_row(Text(left_short(f.name, room - wide - 3)), v, sh, w)
            console.print(t)
    elif s.sample_count == 0:
        console.print("No samples (sampling off, or the program ended within one sampling period).")
    for name, why in s.notes.items():  # (overrides only where they ran: Summary.notes)
        console.print(unresolved_line(name, why))


def cut_line(n: int) -> str:
    """The note on spans still running when a capture window ended (``Summary.cut_spans``)."""
    return (f"{n} span{' was' if n == 1 else 's were'} still running when the window ended: cut at its end "
            f"(marked stepscope.cut; counted above)")


def shape_words(shape: str) -> str:
    """A shape of ``analysis.slow.shape_of`` in words."""
    if shape.startswith("every "):
        return f"every {shape.split()[-1]}th repeat is slower"
    return {"first": "the first repeat is slower than the rest", "irregular": "irregular", "none": "none"}.get(shape, shape)


#: Slow rows a step/repeat table shows in the terminal, at most (the slowest; the rest are counted).
MAX_SLOW_ROWS = 25


def print_steps(st, console: Console, max_columns: int = 5) -> None:
    """The step (or repeat) table: wall, x median, untraced, one column per traced name; only the slow
    cells of a slow row are marked; the rule once under it; the untraced time of slow steps named."""
    from ...analysis.steptable import UNTRACED

    is_step = st.kind == STEP_ATTR
    title = "Steps (diffusion.step)" if is_step else f"Repeats of {left_short(st.span_name)}"
    rows = st.rows
    hidden_slow = 0
    if len(rows) > 40:  # keep the table readable: the first/last few and the slowest of the slow rows
        marked = [r for r in rows if r.slow or r.fill]
        top = sorted(marked, key=lambda r: -r.ratio)[:MAX_SLOW_ROWS]
        hidden_slow = max(st.slow_count, len([r for r in rows if r.slow])) - len([r for r in top if r.slow])
        keep = {id(r) for r in rows[:5] + rows[-5:]} | {id(r) for r in top}
        rows = [r for r in rows if id(r) in keep]
    mem = any(getattr(r, "memory", None) is not None for r in rows)
    base = [[st.call_labels.get(r.call, str(r.call)) if is_step else "", str(r.step), fmt_ns(r.wall_ns),
             f"{r.ratio:.2f} slow" if r.slow else f"{r.ratio:.2f} warm-up" if r.warmup else
             f"{r.ratio:.2f} cpu wait" if r.waited else f"{r.ratio:.2f}",
             fmt_ns(r.untraced_ns)] + ([fmt_bytes(r.memory.peak) + ("" if r.memory.exact_peak else "~")
                                        if r.memory is not None and r.memory.peak is not None else "-"] if mem else [])
            for r in rows]
    fixed = ("call", "repeat", "wall", "x median", "untraced") + (("mem peak",) if mem else ())
    used = sum(max([len(h)] + [len(b[k]) for b in base]) + 3 for k, h in enumerate(fixed))
    cols = []
    for c in st.columns[:max_columns]:  # as many traced columns as fit: numbers are never cut
        w = max([len(_column_label(c))] + [len(fmt_ns(r.by_name.get(c))) for r in rows]) + 3
        if used + w > console.width:
            break
        used += w
        cols.append(c)
    left = len(st.columns) - len(cols)
    body = [b[:3] + [b[3].removesuffix(" slow")] + b[4:] + [fmt_ns(r.by_name.get(c)) for c in cols] for b, r in zip(base, rows)]
    # (the " slow" mark is added with its style below; " warm-up" stays in the text)
    keys = ["call", "step", "wall", "ratio", UNTRACED, *(["memory"] if mem else []), *cols]
    heads = ["call" if is_step else "", "step" if is_step else "repeat", "wall", "x median", "untraced",
             *(["mem peak"] if mem else []), *[_column_label(c) for c in cols]]
    t = Table(title=title, title_justify="left", show_edge=False)
    for k, h in enumerate(heads):
        num_col(t, h, [b[k] + (" slow" if k == 3 and r.slow else "") for b, r in zip(body, rows)])
    for r, b in zip(rows, body):
        marked = set(r.slow_cells) | ({"ratio"} if r.slow else set())
        if r.slow and "wall" in r.slow_cells:
            marked.add("wall")
        cells = [Text(v, style="bold red" if key in marked or (key == "wall" and r.slow) else "")
                 for key, v in zip(keys, b)]
        if r.slow:
            cells[3].append(" slow", style="bold red")
        t.add_row(*cells)
    console.print(t)
    if left:
        console.print(f"[dim](+{left} traced column{'s' if left > 1 else ''} that {'do' if left > 1 else 'does'} not fit "
                      f"this terminal: `--json` or the report {'has them' if left > 1 else 'has it'})[/dim]")
    if hidden_slow > 0:
        console.print(f"[dim](the {MAX_SLOW_ROWS} slowest slow rows are shown; {hidden_slow} more are in `--json`, "
                      "`stepscope explain` and the report)[/dim]")
    console.print(f"[dim]{st.rule}[/dim]")
    slow = st.slow_rows
    if slow:
        total = max(st.total_rows, len(st.rows))
        console.print(f"[bold red]{max(st.slow_count, len(slow))} slow[/bold red] of {total} ({shape_words(st.shape)}): "
                      + ", ".join(f"{_row_name(st, r)} ({r.ratio:.1f}x)" for r in slow[:12])
                      + (f" [dim](the table holds {len(st.rows)} of the {total} rows: the first and the slowest)[/dim]"
                         if total > len(st.rows) else ""))
    named = [r for r in st.rows if r.fill][:12]
    if named:
        u = Table(title=f"Untraced time of {'slow ' if any(r.slow for r in named) else ''}{'steps' if is_step else 'repeats'}: "
                        "the sampled functions in it", title_justify="left", show_edge=False)
        num_col(u, "step" if is_step else "repeat", [_row_name(st, r) for r in named])
        num_col(u, "untraced", [fmt_ns(r.untraced_ns) for r in named])
        room = name_room(console, u)
        u.add_column("sampled in (self time)", overflow="fold", ratio=1)
        for r in named:
            u.add_row(_row_name(st, r), fmt_ns(r.untraced_ns),
                      "\n".join(f"{left_short(f.function, room // 2)} {fmt_ns(f.self_ns)}" + (f"  via {left_short(f.via, room // 3)}" if f.via else "")
                                 for f in r.fill))
        console.print(u)


def _row_name(st, r) -> str:
    """A step row's name in lines that leave out the call column: its index, and its call when there are several
    ("5 of prompt 1 · KSampler #3", "5 of call 1")."""
    if st.kind != STEP_ATTR or not (r.call or len({x.call for x in st.rows}) > 1):
        return str(r.step)
    return f"{r.step} of {st.call_labels.get(r.call) or f'call {r.call}'}"


def unresolved_line(name: str, why: str) -> str:
    """One line for a name that was not traced, that ran inside a torch.compile region, whose overrides in
    subclasses were traced too, or a glob some of whose members cannot be traced (``tracing.globs.is_note``)."""
    if why.startswith("overridden in "):
        return f"[cyan]overrides:[/cyan] {name}: {why}"
    if why.startswith("inside a compiled region"):
        return f"[cyan]compiled:[/cyan] {name}: {why}"
    if why.startswith("not mirrored"):
        return f"[cyan]unmirrored:[/cyan] {name}: {why}"
    if name.endswith(IN_PART) and is_note(why):  # a glob's members that cannot be traced: one count
        return f"[cyan]glob:[/cyan] {name[:-len(IN_PART)]}: {why}"
    return f"[yellow]not traced:[/yellow] {name}: {why}"

