"""``stepscope explain``: which repeats are slow, and which functions make the difference."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import click

from .common import JsonOpt, StoreOpt, UserError, argument, command, handles_errors, open_store, out, print_json


def _listing(names: list[tuple[str, int]], most: int = 40) -> str:
    """Lines under an error: each span name with its call count (at most ``most``, then how many more)."""
    lines = [f"  {name}  ({n} call{'s' if n != 1 else ''})" for name, n in names[:most]]
    if len(names) > most:
        lines.append(f"  ... and {len(names) - most} more (`stepscope report` lists them all)")
    return "".join("\n" + ln for ln in lines)


@command("explain")
@argument("run_id", required=False, help="Run id or prefix (default: the last run).")
@click.option("--span", default=None, help="Span name to compare (default: denoising steps, else the traced name with "
              "the most repeats and time).")
@click.option("--slow", default=None, help="Repeat indices to treat as slow, e.g. 3,7.")
@click.option("--fast", default="all", help="all, median, or repeat indices.")
@StoreOpt
@JsonOpt
@handles_errors
def explain_cmd(run_id: Optional[str], span: Optional[str], slow: Optional[str], fast: str, store: Optional[Path],
                as_json: bool) -> None:
    """Find the slow repeats of a span (or of the denoising steps) and name the functions that make them slow."""
    from ..analysis.calltree import ProfileIndex
    from ..analysis.explain import ExplainError, explain
    from ..analysis.nodes import node_table
    from ..analysis.ranks import process_rows, rank_steps

    st = open_store(store)
    from ..store.reader import load_run

    data = load_run(st, run_id)
    index = ProfileIndex(data.profile)
    # a job of several ranks: its steps rank by rank, the straggler and its cause first (``analysis.ranks``)
    ranks = rank_steps(data, index, span) if data.processes else None
    try:
        e = explain(data, span, slow, fast, index)
    except ExplainError as err:
        if ranks is None and node_table(data.spans) is None:
            raise UserError(str(err) + _listing(err.names)) from None
        e = None
    nodes = node_table(data.spans)  # a node-graph app's nodes and prompts (``--app comfyui``)
    if as_json:
        doc = {"run_id": data.run.id, "explanation": e.to_dict() if e is not None else None}
        if nodes is not None:
            doc["nodes"] = dataclasses.asdict(nodes)
        if ranks is not None:
            doc["ranks"] = dataclasses.asdict(ranks)
        clocks = {r.host: {"offset_ns": r.clock_offset_ns, "basis": r.clock_basis} for r in process_rows(data)
                  if r.clock_basis is not None}
        if clocks:
            doc["clocks"] = clocks
        print_json(doc)
    else:
        from ..output.terminal.explain import print_explanation
        from ..output.terminal.nodes import print_nodes
        from ..output.terminal.processes import print_clocks, print_rank_steps

        out.print(f"[dim]run {data.run.id}[/dim]")
        print_clocks(process_rows(data), out)
        print_rank_steps(ranks, out)
        if nodes is not None:
            print_nodes(nodes, out)
        if e is not None:
            print_explanation(e, out)
