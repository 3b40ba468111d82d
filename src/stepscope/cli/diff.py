"""``stepscope diff``: what changed between two runs, what it cost, where the time went, and why."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Optional

import click

from .common import JsonOpt, StoreOpt, UserError, argument, command, handles_errors, open_store, out, print_json


def load_diff(store, ref_a: str | None, ref_b: str | None, span: str | None = None):
    """``Diff`` of the runs ``pick_runs`` chooses (``analysis.runpick.diff_stored``). Raises UserError (DiffError's
    message) or StoreError."""
    from ..analysis.diff import DiffError
    from ..analysis.runpick import diff_stored

    try:
        return diff_stored(store, ref_a, ref_b, span)
    except DiffError as e:
        raise UserError(str(e)) from None


FORMATS = ("text", "markdown", "json")


@command("diff")
@argument("run_a", required=False, help="Run id or prefix of the run before (default: the run before B of the same "
          "command).")
@argument("run_b", required=False, help="Run id or prefix of the run after (default: the last run).")
@click.option("--span", default=None, help="Span name to compare per call (default: the denoising step, else the "
              "traced name with the most repeats and time).")
@StoreOpt
@JsonOpt
@click.option("--fail-if", default=None, metavar="slower[:PCT]",
              help="Exit with status 1 (after the output, with one line on stderr saying why) when the compared unit "
                   "is significantly slower by diff's rule, and with :PCT (slower:5%) by at least PCT percent. Noise "
                   "alone never fails.")
@click.option("--format", "fmt", default="text", help="text, markdown (GitHub-flavoured: >> $GITHUB_STEP_SUMMARY) or "
              "json (as --json).")
@handles_errors
def diff_cmd(run_a: Optional[str], run_b: Optional[str], span: Optional[str], store: Optional[Path], as_json: bool,
             fail_if: Optional[str], fmt: str) -> None:
    """Compare two runs: environment changes (most likely causes first), the change in time per span and step
    with a bootstrap CI, the functions that took the change, and a one-line verdict."""
    from ..analysis.diff import DiffError
    from ..ci.gate import is_slower, parse_fail_if

    min_pct = parse_fail_if(fail_if) if fail_if is not None else None  # (ValueError: one line, status 2)
    if fmt not in FORMATS:
        raise UserError(f"--format: must be {', '.join(FORMATS[:-1])} or {FORMATS[-1]}, got {fmt!r}")
    if as_json and fmt not in ("text", "json"):
        raise UserError(f"--json and --format {fmt}: give one of them")
    fmt = "json" if as_json else fmt
    st = open_store(store)
    try:
        d = load_diff(st, run_a, run_b, span)
    except DiffError as e:
        raise UserError(str(e)) from None
    failed = fail_if is not None and is_slower(d.headline, min_pct)
    why = f"stepscope: --fail-if {fail_if.strip()}: {d.verdict}" if failed else None
    if fmt == "json":
        doc = dataclasses.asdict(d)
        doc["headline"]["verdict"] = d.headline.verdict
        for row, x in zip(doc["spans"] + doc["steps"], d.spans + d.steps):
            row["verdict"] = x.verdict
        for row, c in zip(doc["env"], d.env):
            row["text"] = c.text
        doc["failed"] = failed
        print_json(doc)
    elif fmt == "markdown":
        from ..output.markdown.diff import to_markdown

        sys.stdout.write(to_markdown(d, failed=why) + "\n")
        sys.stdout.flush()
    else:
        from ..output.terminal.diff import print_diff

        print_diff(d, out)
    if failed:
        print(why, file=sys.stderr)
        raise SystemExit(1)
