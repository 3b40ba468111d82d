"""The list of stored runs (``stepscope runs``): rich and the standard library only, so that listing runs never
imports numpy or the analyses."""

from __future__ import annotations

import datetime as dt
import os
import shlex

from rich.console import Console
from rich.table import Table

from ...core.model import Run
from ...core.units import fmt_ns


def command_text(command: list[str]) -> str:
    """A run's command as a shell would take it back (quoted where needed), never cut; an interpreter given by
    its path is named by its file name (``/venv/bin/python`` -> ``python``)."""
    if not command:
        return ""
    first = command[0]
    if os.sep in first and os.path.basename(first).startswith("python"):
        first = os.path.basename(first)
    return shlex.join([first, *command[1:]])


def print_runs(runs: list[Run], console: Console) -> None:
    """The stored runs, newest first."""
    t = Table(show_edge=False)
    for col in ("run", "started", "wall", "status", "spans", "samples", "command"):
        t.add_column(col, justify="right" if col in ("wall", "spans", "samples") else "left",
                     overflow="fold" if col == "command" else "ellipsis", no_wrap=col != "command")
    for r in runs:
        started = dt.datetime.fromtimestamp(r.anchor_wall_ns / 1e9).strftime("%Y-%m-%d %H:%M:%S") if r.anchor_wall_ns else "-"
        status = r.status if r.exit_code in (None, 0) else f"{r.status} ({r.exit_code})"
        t.add_row(r.id, started, fmt_ns(r.wall_time_ns), status, str(r.span_count), str(r.sample_count),
                  command_text(r.command))
    console.print(t)
