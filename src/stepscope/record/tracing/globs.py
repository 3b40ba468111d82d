"""Globs and overrides for ``tracing.patch``: the members a glob part sees, what to say when a glob matches
nothing, and the subclasses whose overrides of a traced method are traced too.

In a module a glob matches what the module defines (members whose ``__module__`` is that module) and its
submodules; in a class, the methods the class has through its MRO that come from the class itself or from
classes of the class's own top-level package (``class_members``).
"""

from __future__ import annotations

import fnmatch
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from .resolve import GLOB, function_of, module_of, top_package


@dataclass(slots=True)
class Seen:
    """What a glob walked, for the message when it matches nothing: module paths, class paths, and
    matching names that a class has from another package's class (left out by ``class_members``)."""

    modules: dict = field(default_factory=dict)  # path -> None (an ordered set)
    classes: dict = field(default_factory=dict)  # path -> class qualname
    foreign: dict = field(default_factory=dict)  # "Cls.meth" -> the defining class's module.qualname


@dataclass(slots=True)
class LiveGlob:
    """A glob over a package: submodules imported later are matched as they are imported."""

    prefix: str  # the package the glob starts in
    rest: list  # the pattern's parts after it
    seen: Seen
    done: dict = field(default_factory=dict)  # concrete name -> the value tried for it (a module reloaded: new ones)


@dataclass(slots=True)
class LiveOverrides:
    """A traced method whose subclasses' overrides are traced too (looked for again after imports)."""

    cls: type
    attr: str
    packages: set  # top-level packages whose imports are watched: the base's, and those of its subclasses
    overrides: list = field(default_factory=list)  # the overrides' concrete names, in the order found


def class_members(cls: type) -> dict[str, Any]:
    """The attributes a glob sees on ``cls``: name -> the value as stored (descriptors not applied).

    The rule: an attribute counts as the class has it through its MRO (the first class of the MRO that
    defines it), when that class is ``cls`` itself or a class of ``cls``'s own top-level package
    (``app`` for ``app.invocations.compel.Compel``), never ``object`` nor a builtin type. So a node that a
    decorator made as a same-named subclass of the user's class has the user's ``invoke``, and the app's
    own base classes count, while what comes from another package's classes (``torch.nn.Module.to``,
    pydantic's ``BaseModel`` methods, ``enum.Enum``'s) is the framework's plumbing and is left out: name it
    in full (``app.models.Net.to``) to trace it on that class."""
    top = top_package(cls)
    out: dict[str, Any] = {}
    taken: set = set()
    for klass in getattr(cls, "__mro__", (cls,)):
        d = getattr(klass, "__dict__", None)
        if d is None:
            continue
        ours = klass is cls or (klass is not object and top not in ("", "builtins") and top_package(klass) == top)
        for k, v in list(d.items()):
            if k in taken:
                continue
            taken.add(k)
            if ours:
                out[k] = v
    return out


def glob_members(obj: Any, path: str) -> dict[str, Any]:
    """What a glob part matches in ``obj``: a module's members whose ``__module__`` is the module, and its
    submodules that are loaded (also those still executing); a class's ``class_members``."""
    if isinstance(obj, type):
        return class_members(obj)
    d = getattr(obj, "__dict__", None) or {}
    if not isinstance(obj, types.ModuleType):
        return dict(d)
    modname = getattr(obj, "__name__", path)
    out = {}
    for k, v in list(d.items()):
        if isinstance(v, types.ModuleType):
            if getattr(v, "__name__", None) in (f"{path}.{k}", f"{modname}.{k}"):
                out[k] = v
        elif module_of(v) in (path, modname):
            out[k] = v
    if getattr(obj, "__path__", None) is not None:  # submodules not bound on the package yet
        for full in [m for m in list(sys.modules) if m.startswith(modname + ".")]:
            k = full[len(modname) + 1:]
            if "." not in k and k not in out and sys.modules.get(full) is not None:
                out[k] = sys.modules[full]
    return out


def note_foreign(cls: type, pattern: str, seen: Seen) -> None:
    """Keep in ``seen`` the methods matching ``pattern`` that ``cls`` has from another package's class."""
    ours = class_members(cls)
    for klass in getattr(cls, "__mro__", ())[1:]:
        for k, v in list(getattr(klass, "__dict__", {}).items()):
            if k not in ours and fnmatch.fnmatchcase(k, pattern) and function_of(v, glob=True) is not None:
                key = f"{getattr(cls, '__qualname__', '?')}.{k}"
                if len(seen.foreign) < 8:
                    seen.foreign.setdefault(key, f"{klass.__module__}.{klass.__qualname__}")


def nothing_matched(rest: list[str], where: str, seen: Seen) -> str:
    """Why a glob matched nothing, with what it saw."""
    msg = f"no functions match {'.'.join(rest)!r} in {where}"
    last = rest[-1]
    target = f"a method matching {last!r}" if GLOB & set(last) else last
    classes = list(dict.fromkeys(seen.classes.values()))
    modules = [m[len(where) + 1:] for m in seen.modules if m != where]
    if classes:
        shown = ", ".join(classes[:4]) + (", ..." if len(classes) > 4 else "")
        msg += (f": {len(classes)} class{'es' if len(classes) != 1 else ''} seen ({shown}), none defines or"
                f" inherits {target}")
        if seen.foreign:
            k, definer = next(iter(seen.foreign.items()))
            msg += (f" (a glob leaves out what a class inherits from another package's class: {k} is"
                    f" {definer}.{k.rpartition('.')[2]}; name it in full to trace it)")
    elif modules:
        shown = ", ".join(modules[:4]) + (", ..." if len(modules) > 4 else "")
        target = f"a function or class matching {last!r}" if GLOB & set(last) else last
        msg += f": {len(modules)} module{'s' if len(modules) != 1 else ''} seen ({shown}), none defines {target}"
    else:
        msg += f": nothing defined in {where} matches {rest[0]!r}"
    return msg


def subclasses(cls: type) -> list[type]:
    """Every subclass of ``cls`` (transitively), each once, parents before children."""
    out: list[type] = []
    seen: set = {id(cls)}
    todo = [cls]
    while todo:
        c = todo.pop(0)
        try:
            subs = type.__subclasses__(c)
        except TypeError:
            continue
        for sub in subs:
            if id(sub) not in seen:
                seen.add(id(sub))
                out.append(sub)
                todo.append(sub)
    return out


def overrides_note(live: LiveOverrides) -> str:
    """The note kept for a traced method with overrides (``Patcher.unresolved``; ``patch.is_note``)."""
    n = len(live.overrides)
    shown = ", ".join(live.overrides[:4]) + (", ..." if n > 4 else "")
    return (f"overridden in {n} subclass{'es' if n != 1 else ''}: each override traced as a span of its own"
            f" class ({shown})")


#: the kinds of reasons a glob's member could not be traced, as the count's note names them (first match)
_FAIL_KINDS = (("no source", "no source"), ("cannot parse", "no source"), ("source of", "source changed"),
               ("is a property", "properties"), ("not a function", "not functions"), ("cannot be patched", "cannot be patched"))


def _fail_kind(reason: str) -> str:
    return next((kind for key, kind in _FAIL_KINDS if key in reason), "cannot be instrumented")


def members_note(failed: dict[str, str], matched_any: bool = True) -> str:
    """A glob's members that could not be traced (concrete name -> reason), as one count with the kinds of
    reasons, never the list: members the user did not name one by one (a dataclass's ``__init__``, ``__eq__``,
    made from a string) are not failures of the name. ``matched_any``: some members were traced (a note:
    ``is_note``), else none could be (the name's failure)."""
    kinds: dict[str, int] = {}
    for reason in failed.values():
        kind = _fail_kind(reason)
        kinds[kind] = kinds.get(kind, 0) + 1
    why = next(iter(kinds)) if len(kinds) == 1 else ", ".join(f"{n} {k}" for k, n in kinds.items())
    n = len(failed)
    if not matched_any:
        return f"{n} member{'s' if n != 1 else ''} matched, none can be traced ({why})"
    return f"{n} member{'s' if n != 1 else ''} cannot be traced ({why})"


#: how the reasons of notes about traced names begin (``Patcher.unresolved`` holds both: these are not failures)
NOTE_PREFIXES = ("overridden in ", "inside a compiled region", "not mirrored")
_MEMBERS_NOTE = re.compile(r"\d+ members? cannot be traced \(")


def is_note(why: str) -> bool:
    """Whether an entry of ``Patcher.unresolved`` / a run's ``unresolved`` is a note about a name that is
    traced (its overrides, a compiled region, an unmirrored span, a glob's members that cannot be traced: its
    key ends in `` (in part)``), not a name that could not be traced."""
    return isinstance(why, str) and (why.startswith(NOTE_PREFIXES) or _MEMBERS_NOTE.match(why) is not None)
