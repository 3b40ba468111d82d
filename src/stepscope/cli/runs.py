"""``stepscope runs`` (list stored runs) and ``stepscope rm`` (delete runs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import List, Optional

import typer

from ..core import limits
from ..output.terminal.summary import print_runs
from .common import JsonOpt, StoreOpt, handles_errors, open_store, out, print_json


@handles_errors
def runs(limit: int = typer.Option(50, "--limit", "-n", help="Show at most this many runs (0: all)."),
         store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """List stored runs, newest first."""
    limits.in_range("--limit", limit, 0, 1_000_000, integer=True)
    st = open_store(store)
    items = st.list_runs(limit)
    if as_json:
        print_json({"runs": [dataclasses.asdict(r) for r in items]})
    elif not items:
        out.print(f"No runs in {st.path}.")
    else:
        print_runs(items, out)


@handles_errors
def rm(run_ids: List[str] = typer.Argument(..., help="Run ids (or unique prefixes)."),
       store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
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
