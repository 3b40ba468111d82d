"""From a traced name to the attributes that hold what it names: the resolution half of ``tracing.patch``.

A name ``pkg.mod.Class.meth`` (``fnmatch`` globs allowed in any part after the module) is first split at the longest
prefix free of glob characters that is a loaded module (``locate``); the parts after it are then walked from that
module (``expand``): attributes of modules and classes, globs matched against what a module defines or a class has
from its own package (``tracing.globs``). The result is a list of targets ``(owner, attribute, concrete name)``,
which ``tracing.patch.Patcher`` puts probes on (or wraps, for callables without Python code).

Nothing is imported and no lazy attribute is triggered: a module's members are read as it has defined them so far
(``resolve.peek``), so that a lazy package (diffusers, transformers) never imports a submodule early. A part that
may appear with a later import raises ``resolve.Pending`` (the patcher waits for that module); one that cannot
raises ``resolve.Unresolved`` with the nearest existing names. Stdlib only.
"""

from __future__ import annotations

import fnmatch
import sys
import types
from typing import Any, NoReturn

from .globs import Seen, class_members, glob_members, note_foreign
from .resolve import GLOB, MISSING, Pending, Unresolved, did_you_mean, function_of, peek, raw_attr


def locate(name: str) -> tuple[types.ModuleType, str, list[str], bool]:
    """``(module, its name, the parts after it, whether a part has glob characters)`` for a traced ``name``: the
    module is the longest loaded one that prefixes ``name`` with no glob character before it. Raises Pending (the
    first part: nothing of it is loaded yet)."""
    parts = name.split(".")
    limit = next((i for i, p in enumerate(parts) if GLOB & set(p)), len(parts))
    for i in range(min(limit, len(parts) - 1), 0, -1):
        where = ".".join(parts[:i])
        if where in sys.modules:
            return sys.modules[where], where, parts[i:], limit < len(parts)
    raise Pending(parts[0])


def expand(obj: Any, path: str, rest: list[str], out: list, seen: Seen) -> None:
    """Append to ``out`` the targets ``(owner, attribute, concrete name)`` that the name parts ``rest`` reach from
    ``obj`` (a module or class named ``path``), globs expanded (``globs.glob_members``, ``globs.class_members``: a
    class matched by a glob's last part gives its methods); ``seen`` keeps what the globs looked at (for the note of
    a glob that matches nothing). Raises Pending when a part may come with a later import (a package's submodule, the
    script's function, a module still executing) and Unresolved when it cannot (with the nearest names)."""
    head, tail = rest[0], rest[1:]
    if GLOB & set(head):
        if isinstance(obj, type):
            seen.classes[path] = getattr(obj, "__qualname__", path)
        else:
            seen.modules[path] = None
        members = glob_members(obj, path)
        for n in sorted(k for k in members if fnmatch.fnmatchcase(k, head)):
            child = members[n]
            if tail:
                if isinstance(child, types.ModuleType):
                    if not (GLOB & set(tail[0])) and peek(child, tail[0]) is MISSING:
                        seen.modules[f"{path}.{n}"] = None
                        continue
                elif isinstance(child, type):
                    if not (GLOB & set(tail[0])):
                        if len(tail) == 1:
                            seen.classes[f"{path}.{n}"] = getattr(child, "__qualname__", n)
                        if tail[0] not in class_members(child):
                            note_foreign(child, tail[0], seen)
                            continue
                else:
                    continue
                expand(child, f"{path}.{n}", tail, out, seen)
            elif isinstance(child, type):  # a class: its methods (``class_members``), never the class itself
                seen.classes[f"{path}.{n}"] = getattr(child, "__qualname__", n)
                for m, v in class_members(child).items():
                    if function_of(v, glob=True) is not None:
                        out.append((child, m, f"{path}.{n}.{m}"))
            elif not isinstance(child, types.ModuleType) and function_of(child, glob=True) is not None:
                out.append((obj, n, f"{path}.{n}"))
        if isinstance(obj, type):
            note_foreign(obj, head, seen)
        return
    if isinstance(obj, types.ModuleType):
        # only what the module has defined so far: a getattr could make a lazy package
        # (diffusers, transformers) import the submodule early; wait for its import instead
        child = peek(obj, head)
        if child is MISSING:
            if getattr(obj, "__path__", None) is not None or path == "__main__":
                _missing(obj, path, head)
            child = getattr(obj, head, MISSING)  # a module-level __getattr__
            if child is MISSING:
                _missing(obj, path, head)
    else:
        child = raw_attr(obj, head) if not tail else getattr(obj, head, MISSING)
        if child is MISSING:
            _missing(obj, path, head)
    if not tail:
        out.append((obj, head, f"{path}.{head}"))
        return
    expand(child, f"{path}.{head}", tail, out, seen)


def _missing(obj: Any, path: str, attr: str) -> NoReturn:
    """``obj`` (named ``path``) has no ``attr`` now: Pending when it may later, else Unresolved."""
    if isinstance(obj, types.ModuleType) and getattr(obj, "__path__", None) is not None:
        raise Pending(f"{path}.{attr}")  # maybe a submodule not imported yet
    if path == "__main__":
        raise Pending("__main__")  # the script has not defined it yet
    if isinstance(obj, types.ModuleType) and getattr(getattr(obj, "__spec__", None), "_initializing", False):
        raise Pending(f"{path}.{attr}")  # still executing (a retry from a nested import): wait for it
    raise Unresolved(f"{path} has no attribute {attr!r}"
                     + did_you_mean(obj, attr, path + "." if isinstance(obj, types.ModuleType)
                                    else path.rsplit(".", 1)[-1] + "."))
