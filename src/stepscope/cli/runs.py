"""``stepscope runs`` (list stored runs) and ``stepscope rm`` (delete runs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import click

from ..core import limits
from .common import JsonOpt, StoreOpt, argument, command, handles_errors, open_store, out, print_json


@command("runs")
@click.option("--limit", "-n", type=int, default=50, help="Show at most this many runs (0: all).")
@StoreOpt
@JsonOpt
@handles_errors
def runs(limit: int, store: Optional[Path], as_json: bool) -> None:
    """List stored runs, newest first."""
    limits.in_range("--limit", limit, 0, 1_000_000, integer=True)
    st = open_store(store)
    items = st.list_runs(limit)
    if as_json:
        print_json({"runs": [dataclasses.asdict(r) for r in items]})
    elif not items:
        out.print(f"No runs in {st.path}.")
    else:
        from ..output.terminal.runs import print_runs  # (rich's tables: not for --json)

        print_runs(items, out)


@command("rm")
@argument("run_ids", nargs=-1, required=True, help="Run ids (or unique prefixes).")
@StoreOpt
@JsonOpt
@handles_errors
def rm(run_ids: tuple[str, ...], store: Optional[Path], as_json: bool) -> None:
    """Delete runs and their files."""
    st = open_store(store)
    ids = [st.resolve_id(r) for r in run_ids]
    for rid in ids:
        st.delete_run(rid)
    if as_json:
        print_json({"deleted": ids})
    else:
        for rid in ids:
            out.print(f"deleted {rid}")
