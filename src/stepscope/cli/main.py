"""``stepscope``: the command-line entry point (click). Each subcommand lives in its own module.

Only the subcommand named on the command line is imported (``stepscope device trace.json`` never loads the
web server, the benchmark runner or the tracer), and ``stepscope --help`` imports none: it lists the table's
short helps (each the first line of its command's help; a test keeps them equal). A name that is not a
subcommand: click says so.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click


class Entry(NamedTuple):
    """A subcommand: its module under ``stepscope.cli``, the click command's name there, its short help."""

    module: str
    attr: str
    short: str


#: subcommand -> where its click command is and what ``stepscope --help`` says of it, in the help's order
COMMANDS: dict[str, Entry] = {
    "run": Entry("run", "run", "Run a Python program with the named functions traced and every thread sampled."),
    "demo": Entry("demo", "demo", "Run txt2img on a Stable Diffusion pipeline under stepscope with the default "
                  "trace list."),
    "runs": Entry("runs", "runs", "List stored runs, newest first."),
    "rm": Entry("runs", "rm", "Delete runs and their files."),
    "report": Entry("report", "report", "Write the HTML report of a run: waterfall, flame graphs, step table (opens "
                    "offline); with --against RUN_A,"),
    "export": Entry("export", "export", "Export a run (spans and samples) to speedscope or Chrome trace / Perfetto "
                    "JSON (with the device"),
    "explain": Entry("explain", "explain_cmd", "Find the slow repeats of a span (or of the denoising steps) and name "
                     "the functions that make them slow."),
    "diff": Entry("diff", "diff_cmd", "Compare two runs: environment changes (most likely causes first), the change "
                  "in time per span and step"),
    "suggest": Entry("suggest", "suggest_cmd", "Suggest functions to trace next (wide, untraced, nameable functions "
                     "inside the traced spans) and the"),
    "try": Entry("try_", "try_cmd", "Apply fixes to a diffusers program at its first pipeline call, each "
                 "configuration in its own process, and"),
    "device": Entry("device", "device", "Device idle gaps (host wait / kernel wait / other), host-device syncs with "
                    "their Python line and"),
    "capture": Entry("capture", "capture_cmd", "Capture a window of a running program: traces on, sampler on, then "
                     "everything off again."),
    "serve": Entry("serve", "serve", "Serve the web UI (transactions, waterfall, flame graphs, explain, device, "
                   "benchmarks) and take the"),
    "bench": Entry("bench", "bench", "Benchmark fixes: a configuration matrix in isolated processes, interleaved "
                   "repeats, CIs."),
    "keys": Entry("keys", "keys", "Project keys for `stepscope serve` (the sentry_key in a DSN)."),
}


def load(name: str) -> click.Command:
    """The click command of the subcommand ``name`` (its module imported). Raises KeyError for no such name."""
    entry = COMMANDS[name]
    return getattr(importlib.import_module(f".{entry.module}", __package__), entry.attr)


class LazyGroup(click.Group):
    """The top-level group: its subcommands are the table's, each module imported when its command is wanted
    (click's "lazy loading subcommands")."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The table's names, in its order."""
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The command ``name`` (its module imported now), or None for no such subcommand."""
        return load(name) if name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The subcommands with their short help from the table: no module imported."""
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        with formatter.section("Commands"):
            formatter.write_dl([(name, shorten(e.short, limit)) for name, e in COMMANDS.items()])


def shorten(text: str, limit: int) -> str:
    """``text`` as click lists a command's help in at most ``limit`` characters: up to its first sentence's end,
    else cut after a whole word with ``...``."""
    words = text.split()
    total = 0
    for i, word in enumerate(words):
        total += len(word) + (i > 0)
        if total > limit:
            break
        if word.endswith("."):
            return " ".join(words[:i + 1])
    else:
        return " ".join(words)
    while i > 0 and len(" ".join(words[:i])) + 3 > limit:
        i -= 1
    return " ".join(words[:i]) + "..."


app = LazyGroup("stepscope", no_args_is_help=True, context_settings={"show_default": True},
                help="Trace, sample and explain the performance of Python/ML programs you did not write.")

if __name__ == "__main__":
    app()
