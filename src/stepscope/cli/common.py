"""What every subcommand shares: the store option, one-line errors, JSON output, consoles."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import orjson
import typer
from rich.console import Console

from ..store.db import DatabaseError, Store, StoreError
from ..store.schema import damaged

StoreOpt = typer.Option(None, "--store", help="Store folder (default: $STEPSCOPE_STORE or ./.stepscope).",
                        envvar="STEPSCOPE_STORE", show_default=False)
JsonOpt = typer.Option(False, "--json", help="Print one JSON document instead of tables.")


def setting_option(name: str, default: Any = ..., *, help_tail: str = "") -> Any:
    """A typer option that sets the ``Settings`` field ``name``: its flags and help from the field's declaration
    (``record.settings.field_info``; ``help_tail`` appended to the help), its default the field's own unless given
    (a list for a repeatable option). Its value is checked by the field's rule (``settings.check_flags``), once.
    Raises KeyError for no such field, ValueError for a field that is not a CLI option."""
    from ..record.settings import Settings, field_info

    info = field_info(name)
    if not info.flags:
        raise ValueError(f"{name}: not a CLI option of Settings")
    if default is ...:
        default = Settings.__dataclass_fields__[name].default
    return typer.Option(default, *info.flags, help=info.help + help_tail)

def _console(stderr: bool) -> Console:
    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal and "COLUMNS" not in __import__("os").environ:
        c = Console(stderr=stderr, highlight=False, width=140)  # logs and pipes: don't squeeze to 80
    return c


out = _console(False)
err = _console(True)


class UserError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def fail(message: str, code: int = 2) -> None:
    """Print ``stepscope: error: message`` on stderr and exit."""
    print(f"stepscope: error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def handles_errors(fn: Callable) -> Callable:
    """Turn expected failures into one-line messages instead of tracebacks."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (UserError, StoreError, ValueError, OSError) as e:
            fail(str(e))
        except DatabaseError as e:  # a store that opened but is damaged further in
            fail(damaged(_opened[-1] if _opened else "the store's runs.db", e))

    return wrapper


_opened: list[Path] = []  # runs.db of each store this command opened, to name it in SQLite errors


def open_store(path: Optional[Path], create: bool = False) -> Store:
    """The store at ``path`` (default: ``$STEPSCOPE_STORE`` or ``./.stepscope``), created when missing if
    ``create``. Raises StoreError (one line naming ``runs.db``) for a missing, foreign, newer or damaged store."""
    st = Store(path, create=create)
    _opened.append(st.path / "runs.db")
    return st


def print_json(doc: Any) -> None:
    """One JSON document on stdout (numpy scalars and dataclasses handled by orjson)."""
    sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) + b"\n")
    sys.stdout.flush()
