"""App presets (``--app NAME``): what to trace in a popular app, keyed on its stable public names (stdlib only: the
hooks run inside the program).

A ``Preset`` lists qualified names to trace, span names made from the arguments (``tracing.labels``: templates,
or a preset's own ``facts`` function for what needs more than attribute and item access), the op of those spans
(``node``: one execution of a node of a node-graph app; ``prompt``: the unit nodes and steps belong to) and a
one-line description. Steps come from the step rules (``steps.rules``), traced with any preset.

A name of the preset that the app's version lacks (its module imported, the name not in it) is said in one line
after the run (``missing_line``); a name whose module the program never imported is not a fault of the preset
(that part of the app did not run) and is not mentioned.

To add an app: a module here with its ``PRESET``, and its name in ``_MODULES``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Preset:
    """An app preset. ``traces``: qualified names (globs allowed); ``labels``: name -> label template;
    ``facts``: name -> ``(fn, op)``, ``fn(locals) -> (span name | None, attrs | None)`` read when the call starts
    (its errors are swallowed); ``ops``: name -> op of its spans (with a label or facts)."""

    name: str
    description: str
    traces: tuple[str, ...]
    labels: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    ops: dict = field(default_factory=dict)


_MODULES = {"diffusers": "diffusers_app", "comfyui": "comfyui", "invokeai": "invokeai"}

#: The preset names ``--app`` accepts.
NAMES = tuple(_MODULES)


def get(name: str) -> Preset:
    """The preset called ``name``. Raises ValueError (one line listing the names) for an unknown one."""
    mod = _MODULES.get((name or "").strip().lower())
    if mod is None:
        raise ValueError(f"--app: no preset {name!r} (known: {', '.join(NAMES)})")
    return importlib.import_module(f"{__name__}.{mod}").PRESET


def missing_line(preset: Preset, unresolved: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """Split ``unresolved`` (name -> why) into the rest and one line for the preset's names that this version of
    the app lacks (None when it lacks none); the preset's names whose module was never imported are dropped."""
    mine = set(preset.traces)
    rest: dict[str, str] = {}
    lacks: list[str] = []
    for name, why in unresolved.items():
        base = name[: -len(" (in part)")] if name.endswith(" (in part)") else name
        if base not in mine:
            rest[name] = why
        elif "was never imported" in why or "does not define it" in why:
            continue
        else:
            lacks.append(base)
    if not lacks:
        return rest, None
    return rest, (f"this version of {preset.name} lacks {len(lacks)} of the preset's {len(mine)} names "
                  f"(the rest are traced): {', '.join(sorted(lacks))}")
