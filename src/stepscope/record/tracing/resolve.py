"""Name resolution for ``tracing.patch``: what a qualified name's parts reach, without importing anything.

The helpers read a module's or class's own ``__dict__`` (``own_attr``, ``raw_attr``), a lazy module's
re-exports whose defining submodule is loaded (``peek``: diffusers, transformers ``_LazyModule``), the
Python function behind an attribute value (``function_of``), the span name where the object is defined
(``canonical``), and the nearest existing names for a name that does not resolve (``did_you_mean``).
``Pending`` and ``Unresolved`` are how a resolution step says "wait for an import" or "cannot".
"""

from __future__ import annotations

import difflib
import functools
import sys
import types
from typing import Any, Iterable

from .wrappers import is_wrapper

#: the characters that make a name's part a glob (``fnmatch``)
GLOB = set("*?[")
#: "no such attribute" (``own_attr``, ``raw_attr``, ``peek``), distinct from any value
MISSING = object()


def normalize_targets(functions_to_trace: Iterable[Any] | None) -> list[str]:
    """Accept ``["pkg.mod.f", ...]`` or Sentry's ``[{"qualified_name": "pkg.mod.f"}, ...]``.

    Raises ValueError naming the bad entry.
    """
    out: list[str] = []
    for i, item in enumerate(functions_to_trace or ()):
        if isinstance(item, dict):
            item = item.get("qualified_name")
        if not isinstance(item, str) or not item.strip() or "." not in item.strip():
            raise ValueError(f"functions_to_trace[{i}]: expected 'module.qualified.name', got {item!r}")
        name = item.strip()
        if name not in out:
            out.append(name)
    return out


class Pending(Exception):
    """The name needs a module that is not imported yet (``module`` names it)."""

    def __init__(self, module: str):
        self.module = module


class Unresolved(Exception):
    """The name cannot be resolved (the message says why)."""


def function_of(v: Any, glob: bool = False) -> types.FunctionType | None:
    """The Python function behind an attribute value: itself, a static/class method's function, the
    innermost of a ``functools.wraps`` chain (decorators such as ``torch.no_grad()`` share one wrapper
    code among all the functions they decorate), an ``lru_cache``'s function; for an explicit name
    (``glob`` False) also a bound method's, a ``functools.partial``'s and a callable instance's
    ``__call__``. None for builtins and other objects without Python code."""
    if isinstance(v, (staticmethod, classmethod)):
        v = v.__func__
    for _ in range(32):
        if isinstance(v, types.FunctionType):
            w = v.__dict__.get("__wrapped__") if hasattr(v, "__dict__") else None
            if w is None or is_wrapper(v):
                return v if not is_wrapper(v) else function_of(v.__wrapped__, glob)
            v = w
        elif isinstance(v, type):
            return None
        elif hasattr(v, "cache_info") and getattr(v, "__wrapped__", None) is not None:  # functools.lru_cache
            v = v.__wrapped__
        elif glob:
            return None
        elif isinstance(v, types.MethodType):
            v = v.__func__
        elif isinstance(v, functools.partial):
            v = v.func
        elif callable(v) and isinstance(getattr(type(v), "__call__", None), types.FunctionType):
            v = type(v).__call__
        else:
            return None
    return None


def canonical(owner: Any, attr: str, fn: Any, concrete: str) -> str:
    """The span name: where the object is defined (``module.Qualname``), whatever path named it."""
    if isinstance(owner, type):
        mod, qual = getattr(owner, "__module__", None), getattr(owner, "__qualname__", None)
        if isinstance(mod, str) and isinstance(qual, str) and "<locals>" not in qual:
            return f"{mod}.{qual}.{attr}"
        return concrete
    raw = raw_attr(owner, attr)
    mod, qual = getattr(raw, "__module__", None), getattr(raw, "__qualname__", None)
    if isinstance(mod, str) and isinstance(qual, str) and "<locals>" not in qual and mod in sys.modules:
        return f"{mod}.{qual}"
    return concrete


def peek(module: types.ModuleType, name: str) -> Any:
    """``module.name`` without importing anything: the module's own attribute, or a lazy module's
    (diffusers, transformers ``_LazyModule``) re-export whose defining submodule is already loaded."""
    for _ in range(16):
        v = own_attr(module, name)
        if v is not MISSING:
            return v
        mapping = own_attr(module, "_class_to_module")  # never getattr: a module __getattr__ may import
        if not isinstance(mapping, dict) or name not in mapping:
            return MISSING
        sub = sys.modules.get(f"{module.__name__}.{mapping[name]}")
        if sub is None:
            return MISSING
        module = sub
    return MISSING


def did_you_mean(obj: Any, attr: str, prefix: str = "", suffix: str = "") -> str:
    """``"; did you mean X?"`` with the nearest names of ``obj`` (never imports anything), or ""."""
    try:
        names = [n for n in (list(getattr(obj, "__dict__", {}) or {}) + list(dir(obj))) if isinstance(n, str)]
    except Exception:
        return ""
    mapping = own_attr(obj, "_class_to_module")
    if isinstance(mapping, dict):
        names += [n for n in mapping if isinstance(n, str)]
    close = difflib.get_close_matches(attr, sorted(set(names)), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(prefix + c + suffix for c in close) + "?"


def lazy_parent(awaited: str) -> bool:
    """The awaited name's parent is a lazy module (its re-exports appear as their submodules load)."""
    parent = sys.modules.get(awaited.rpartition(".")[0])
    return parent is not None and isinstance(own_attr(parent, "_class_to_module"), dict)


def own_attr(obj: Any, attr: str) -> Any:
    """``obj.__dict__[attr]`` (never a descriptor, never ``__getattr__``), or ``MISSING``."""
    d = getattr(obj, "__dict__", None)
    if d is None:
        return MISSING
    try:
        return d.get(attr, MISSING)
    except Exception:
        return MISSING


def raw_attr(obj: Any, attr: str) -> Any:
    """The attribute as stored (descriptors not applied): own dict first, then the MRO for classes."""
    if isinstance(obj, type):
        for klass in obj.__mro__:
            v = klass.__dict__.get(attr, MISSING)
            if v is not MISSING:
                return v
        return MISSING
    v = own_attr(obj, attr)
    if v is MISSING:
        v = getattr(obj, attr, MISSING)
    return v


def module_of(v: Any) -> Any:
    """``v.__module__``, or None (never raises: a lazy proxy's attribute access may)."""
    try:
        return getattr(v, "__module__", None)
    except Exception:
        return None


def top_package(obj: Any) -> str:
    """The top-level package of a class (of its ``__module__``), or of a module name."""
    mod = obj if isinstance(obj, str) else module_of(obj)
    return mod.partition(".")[0] if isinstance(mod, str) else ""
