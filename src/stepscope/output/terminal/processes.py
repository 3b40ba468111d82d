"""A job's processes and its steps rank by rank (``analysis.ranks``) in the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ...analysis.ranks import ProcessRow, RankSteps
from ...core.procs import app_label
from ...core.units import fmt_ns

#: steps shown in the steps x ranks table (the held-up ones always)
SHOWN_STEPS = 12


def _ms(ns: float | None) -> str:
    return "-" if ns is None else fmt_ns(ns)


def print_processes(rows: list[ProcessRow], console: Console) -> None:
    """The job's processes: who started whom, how each ended, what each recorded."""
    if not rows:
        return
    t = Table(title=f"Processes ({len(rows)})", title_justify="left", show_edge=False)
    for col in ("process", "parent", "started", "program", "status", "wall", "spans", "samples"):
        t.add_column(col, justify="right" if col in ("wall", "spans", "samples") else "left", no_wrap=col != "program")
    for r in rows:
        status = r.status if r.exit_code in (None, 0) else f"{r.status} (exit {r.exit_code})"
        t.add_row(escape(r.label), "-" if r.ppid is None else str(r.ppid), r.how,
                  escape(app_label(r.command) if r.command else ""), escape(status), _ms(r.wall_ns),
                  f"{r.span_count:,}", f"{r.sample_count:,}")
    console.print(t)
    print_clocks(rows, console)


def print_clocks(rows: list[ProcessRow], console: Console) -> None:
    """For a job ingested from several hosts: each host's clock offset against the first and its basis (nothing for
    a job of one host)."""
    hosts: dict[str, ProcessRow] = {}
    for r in rows:
        if r.clock_basis is not None:
            hosts.setdefault(r.host, r)
    if len({h for h in hosts}) < 2:
        return
    console.print("clocks (hosts' wall clocks, lined up on the first host's):")
    for h, r in hosts.items():
        off = r.clock_offset_ns or 0
        console.print(f"  {escape(h or '?')}: {'+' if off >= 0 else '-'}{fmt_ns(abs(off))} ({escape(r.clock_basis or '')})")


def print_rank_steps(rs: RankSteps | None, console: Console) -> None:
    """Steps x ranks (wall time, the step's straggler marked ``*``), then the straggler, its cause and the wait."""
    if rs is None:
        return
    t = Table(title=f"Steps by rank: {escape(rs.name)}", title_justify="left", show_edge=False,
              caption="wall time per rank; * the straggler of a held-up step (the rank that ran longest in it), "
                      "lead: how much longer than the other ranks' median", caption_justify="left")
    t.add_column("step", justify="right")
    for r in rs.ranks:
        t.add_column(f"rank {r}", justify="right")
    t.add_column("lead", justify="right")
    shown = sorted(set(range(min(SHOWN_STEPS, len(rs.wall)))) | set(rs.held))
    for s in shown:
        cells = []
        for j, r in enumerate(rs.ranks):
            mark = "*" if rs.straggler[s] == r and s in rs.held else ""
            cells.append(_ms(rs.wall[s][j]) + mark)
        t.add_row(str(s), *cells, _ms(rs.lead_ns[s]) if s in rs.held else "")
    console.print(t)
    if len(rs.wall) > len(shown):
        console.print(f"[dim]{len(rs.wall) - len(shown)} more steps not shown (--json has them all)[/dim]")
    if rs.job_straggler is None:
        console.print("[dim]no step held up by one rank (lead under the threshold on every step)[/dim]")
        return
    mine = [s for s in rs.held if rs.straggler[s] == rs.job_straggler]
    lead = sum(rs.lead_ns[s] for s in mine)
    console.print(f"[bold]straggler: rank {rs.job_straggler}[/bold] held up {len(mine)} of {len(rs.wall)} steps "
                  f"({', '.join(map(str, mine[:10]))}{' ...' if len(mine) > 10 else ''}): "
                  f"it ran {_ms(lead)} longer than the other ranks' median")
    if rs.cause:
        console.print("  cause (self time over the other ranks', per held-up step): "
                      + ", ".join(f"{escape(n)} +{_ms(ns)}" for n, ns in rs.cause[:3]))
    for r, ns in rs.waited_for.items():
        console.print(f"  rank {r} waited {_ms(ns)} in those steps (blocked: in collectives, for the straggler)")
