"""``stepscope``: the command-line entry point. Each subcommand lives in its own module.

Only the subcommand named on the command line is imported (``stepscope device trace.json`` never loads the
web server, the benchmark runner or the tracer): the whole table is built for ``--help`` and for a name that
is not a subcommand (click then says so).
"""

from __future__ import annotations

import importlib
import sys

import typer

#: subcommand -> (module under stepscope.cli, attribute, "command" | "group", extra command settings)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("run", "run", "command"),
    "demo": ("demo", "demo", "command"),
    "runs": ("runs", "runs", "command"),
    "rm": ("runs", "rm", "command"),
    "report": ("report", "report", "command"),
    "export": ("export", "export", "command"),
    "explain": ("explain", "explain_cmd", "command"),
    "diff": ("diff", "diff_cmd", "command"),
    "suggest": ("suggest", "suggest_cmd", "command"),
    "try": ("try_", "try_cmd", "command"),
    "device": ("device", "device", "command"),
    "bench": ("bench", "app", "group"),
    "capture": ("capture", "capture_cmd", "command"),
    "serve": ("serve", "serve", "command"),
    "keys": ("keys", "app", "group"),
}


def build(names=None) -> typer.Typer:
    """The Typer app with the subcommands ``names`` (None: all), in the table's order."""
    t = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                    help="Trace, sample and explain the performance of Python/ML programs you did not write.")
    t.callback()(_group)  # a group even with one subcommand registered (typer runs a lone command directly)
    for name, (mod, attr, kind) in COMMANDS.items():
        if names is not None and name not in names:
            continue
        m = importlib.import_module(f".{mod}", __package__)
        obj = getattr(m, attr)
        if kind == "group":
            t.add_typer(obj, name=name)
        else:
            t.command(name, context_settings=getattr(m, "CONTEXT", None) if name in ("run", "try") else None)(obj)
    return t


def _group() -> None:
    pass


class _App:
    """Callable like a Typer app (the console script and ``python -m stepscope`` call it)."""

    def __call__(self, *args, **kwargs):
        argv = sys.argv[1:]
        name = argv[0] if argv and not argv[0].startswith("-") else None
        return build([name] if name in COMMANDS else None)(*args, **kwargs)


app = _App()

if __name__ == "__main__":
    app()
