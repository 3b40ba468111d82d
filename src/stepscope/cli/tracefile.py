"""Trace lists from a file (``--trace-file``): TOML or plain text.

TOML (``traces.toml``)::

    functions_to_trace = ["pkg.mod.Class.method", {qualified_name = "pkg.mod.func"}]
    profiles_hz = 199            # optional
    steps = ["mypkg.loop.denoise_one"]   # optional: each call of these is one denoising step (traced too)
    app = "comfyui"              # optional: an app preset (``apps``)

    [labels]                     # optional: span names from the arguments (``record.spans.labels``)
    "execution.execute" = "{dynprompt.original_prompt[current_item]['class_type']} #{current_item}"

Plain text (any other suffix): one qualified name per line; ``#`` starts a comment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore

from ..core.jsondepth import TOO_DEEP
from ..record.settings import check_field
from ..record.tracing.resolve import normalize_targets


class TraceFileError(ValueError):
    """A trace file that cannot be read; the message names the file and the field."""


@dataclass
class TraceFile:
    """What a trace file asks for: ``names`` to trace, ``hz`` (or None), ``steps`` (names each of whose calls is a
    step), ``labels`` (name -> template), ``app`` (a preset name, or None)."""

    names: list[str]
    hz: float | None = None
    steps: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    app: str | None = None


def read_trace_file(path: str | Path) -> TraceFile:
    """The trace file at ``path``. Raises TraceFileError (one line naming the file and the field)."""
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
                hz = check_field("profiles_hz", hz)
            except ValueError as e:
                raise TraceFileError(f"{p}: {e}") from None
        steps = doc.get("steps", [])
        if not isinstance(steps, list) or not all(isinstance(x, str) and x.strip() for x in steps):
            raise TraceFileError(f"{p}: steps: expected a list of names")
        labels = doc.get("labels", {})
        if not isinstance(labels, dict):
            raise TraceFileError(f"{p}: labels: expected a table of name = \"template\"")
        app = doc.get("app")
        try:
            labels = check_field("labels", labels)
            if app is not None:
                if not isinstance(app, str):
                    raise ValueError("app: expected a preset name")
                app = check_field("app", app)
        except ValueError as e:
            raise TraceFileError(f"{p}: {e}") from None
        return TraceFile(names, hz, [x.strip() for x in steps], labels, app)
    lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    try:
        return TraceFile(normalize_targets([ln for ln in lines if ln]))
    except ValueError as e:
        raise TraceFileError(f"{p}: {e}") from None
