"""Trace lists from a file (``--trace-file``): TOML or plain text.

TOML (``traces.toml``)::

    functions_to_trace = ["pkg.mod.Class.method", {qualified_name = "pkg.mod.func"}]
    profiles_hz = 199            # optional

Plain text (any other suffix): one qualified name per line; ``#`` starts a comment.
"""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore

from . import limits
from .nesting import TOO_DEEP
from .tracing.resolve import normalize_targets


class TraceFileError(ValueError):
    """A trace file that cannot be read; the message names the file and the field."""


def read_trace_file(path: str | Path) -> tuple[list[str], float | None]:
    """``(names, profiles_hz or None)`` from ``path``. Raises TraceFileError."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise TraceFileError(f"{p}: {e.strerror}") from None
    if p.suffix == ".toml":
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise TraceFileError(f"{p}: not valid TOML ({e})") from None
        except RecursionError:  # (tomllib recurses a few frames per level of arrays or inline tables)
            raise TraceFileError(f"{p}: {TOO_DEEP}") from None
        names = doc.get("functions_to_trace", [])
        if not isinstance(names, list):
            raise TraceFileError(f"{p}: functions_to_trace: expected a list of names")
        try:
            names = normalize_targets(names)
        except ValueError as e:
            raise TraceFileError(f"{p}: {e}") from None
        hz = doc.get("profiles_hz")
        if hz is not None:
            try:
                hz = limits.hz("profiles_hz", hz)
            except ValueError as e:
                raise TraceFileError(f"{p}: {e}") from None
        return names, hz
    lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    try:
        return normalize_targets([ln for ln in lines if ln]), None
    except ValueError as e:
        raise TraceFileError(f"{p}: {e}") from None
