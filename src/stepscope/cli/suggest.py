"""``stepscope suggest``: which functions to trace next."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import click

from ..core import limits
from .common import JsonOpt, StoreOpt, argument, command, handles_errors, open_store, out, print_json


@command("suggest")
@argument("run_id", required=False, help="Run id or prefix (default: the last run).")
@click.option("--top", "-n", type=int, default=10, help="How many functions.")
@StoreOpt
@JsonOpt
@handles_errors
def suggest_cmd(run_id: Optional[str], top: int, store: Optional[Path], as_json: bool) -> None:
    """Suggest functions to trace next (wide, untraced, nameable functions inside the traced spans) and the
    fixes that apply to what the run recorded, with the `stepscope try` line that measures them."""
    from ..analysis.fixhints import fix_hints, try_command
    from ..analysis.suggest import suggest
    from ..store.reader import load_run

    limits.in_range("--top", top, 1, 1000, integer=True)
    st = open_store(store)
    data = load_run(st, run_id)  # spans as columns: no object per span
    items = suggest(data, top=top)
    hints = fix_hints(data)
    command = try_command(data, hints)
    if as_json:
        print_json({"run_id": data.run.id, "suggestions": [dataclasses.asdict(s) for s in items],
                    "functions_to_trace": [s.qualified_name for s in items],
                    "fixes": [dataclasses.asdict(h) for h in hints], "try_command": command})
    else:
        from ..output.terminal.explain import print_suggestions
        from ..output.terminal.try_ import print_fix_hints

        print_suggestions(items, out)
        print_fix_hints(hints, command, out)
