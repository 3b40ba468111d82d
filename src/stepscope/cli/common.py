"""What every subcommand shares: the store and JSON options, options made from ``Settings`` fields, commands whose
positional arguments have help, one-line errors, JSON output, consoles.

Light on purpose (click and the standard library at module level): every command's start, ``--help`` included,
imports it. rich, orjson and the store are imported when first used.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import click

#: a path option or argument: the value as a ``pathlib.Path`` (nothing checked on disk)
PATH = click.Path(path_type=Path)

StoreOpt = click.option("--store", type=PATH, default=None, envvar="STEPSCOPE_STORE", show_envvar=True,
                        show_default=False, help="Store folder (default: $STEPSCOPE_STORE or ./.stepscope).")
JsonOpt = click.option("--json", "as_json", is_flag=True, default=False,
                       help="Print one JSON document instead of tables.")


class Argument(click.Argument):
    """A positional argument with a help text (``help=``), listed under "Arguments:" in its command's help
    (click before 8.5 takes no help for arguments)."""

    def __init__(self, param_decls, help: str | None = None, **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self.help = help


def argument(*decls: str, help: str | None = None, **attrs: Any) -> Callable:
    """``click.argument`` with a help text (``Argument``)."""
    return click.argument(*decls, cls=Argument, help=help, **attrs)


class Command(click.Command):
    """A command whose help lists its positional arguments ("Arguments:", before "Options:")."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Usage, the docstring, the arguments, the options, the epilog."""
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        self.format_arguments(ctx, formatter)
        self.format_options(ctx, formatter)
        self.format_epilog(ctx, formatter)

    def format_arguments(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each positional argument: its name (``...`` when variadic) and help, ``[required]`` when required."""
        rows = []
        for p in self.get_params(ctx):
            if isinstance(p, click.Argument):
                name = p.human_readable_name + ("..." if p.nargs != 1 else "")
                text = getattr(p, "help", None) or ""
                if p.required:
                    text = f"{text}  [required]" if text else "[required]"
                rows.append((name, text))
        if rows:
            with formatter.section("Arguments"):
                formatter.write_dl(rows)


class Group(click.Group):
    """A group of ``Command``\\ s, listed in the order they were added."""

    command_class = Command

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The subcommands in the order they were added (click sorts them)."""
        return list(self.commands)


def command(name: str, **attrs: Any) -> Callable:
    """``click.command`` making a ``Command``."""
    return click.command(name, cls=Command, **attrs)


def setting_option(name: str, default: Any = ..., *, help_tail: str = "") -> Callable:
    """A click option that sets the ``Settings`` field ``name``: its flags and help from the field's declaration
    (``record.settings.field_info``; ``help_tail`` appended to the help), its type from the field's (bool: a flag,
    ``--x/--no-x`` where declared so; int, float, str), its default the field's own unless given (a list: a
    repeatable option, its values a tuple). Its value is checked by the field's rule (``settings.check_flags``),
    once. Raises KeyError for no such field, ValueError for a field that is not a CLI option."""
    from ..record.settings import Settings, field_info

    info = field_info(name)
    if not info.flags:
        raise ValueError(f"{name}: not a CLI option of Settings")
    f = Settings.__dataclass_fields__[name]
    if default is ...:
        default = f.default
    kind = str(f.type).split("[")[0].split("|")[0].strip()  # (annotations are strings here)
    attrs: dict[str, Any] = {"default": default, "help": info.help + help_tail}
    if isinstance(default, (list, tuple)):
        attrs.update(multiple=True, type=str, default=tuple(default))
    elif kind == "bool":
        attrs["is_flag"] = True
    else:
        attrs["type"] = {"int": int, "float": float}.get(kind, str)
    return click.option(*info.flags, **attrs)


class _LazyConsole:
    """A rich ``Console`` made on first use (rich is imported then, not when the command line starts)."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            self._console = _console(self._stderr)
        return getattr(self._console, name)


def _console(stderr: bool):
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(stderr=stderr, highlight=False, width=140)  # logs and pipes: don't squeeze to 80
    return c


out = _LazyConsole(False)
err = _LazyConsole(True)


class UserError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def fail(message: str, code: int = 2) -> None:
    """Print ``stepscope: error: message`` on stderr and exit."""
    print(f"stepscope: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def handles_errors(fn: Callable) -> Callable:
    """Turn expected failures into one-line messages instead of tracebacks: ``UserError``, ValueError, OSError and
    the store's ``StoreError`` (its message), a store damaged further in than its opening (SQLite's error, naming
    the store's ``runs.db``)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            db = sys.modules.get(f"{__package__.rpartition('.')[0]}.store.db")  # (no store opened: not imported)
            if isinstance(e, (UserError, ValueError, OSError)) or (db is not None and isinstance(e, db.StoreError)):
                fail(str(e))
            if db is not None and isinstance(e, db.DatabaseError):  # a store that opened but is damaged further in
                from ..store.schema import damaged

                fail(damaged(_opened[-1] if _opened else "the store's runs.db", e))
            raise

    return wrapper


_opened: list[Path] = []  # runs.db of each store this command opened, to name it in SQLite errors


def open_store(path: Optional[Path], create: bool = False):
    """The store (``store.db.Store``) at ``path`` (default: ``$STEPSCOPE_STORE`` or ``./.stepscope``), created when
    missing if ``create``. Raises StoreError (one line naming ``runs.db``) for a missing, foreign, newer or damaged
    store."""
    from ..store.db import Store

    st = Store(path, create=create)
    _opened.append(st.path / "runs.db")
    return st


def print_json(doc: Any) -> None:
    """One JSON document on stdout (numpy scalars and dataclasses handled by orjson)."""
    import orjson

    sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) + b"\n")
    sys.stdout.flush()
