"""Trace functions by qualified name, with no edit to the program.

``Patcher.add(names)`` resolves each name now if its module is loaded, or when its module is imported
(an import hook that never imports anything early). What it resolves:

- module functions ``pkg.mod.func``; methods, staticmethods and classmethods ``pkg.mod.Class.meth``;
  methods of nested classes ``pkg.mod.Outer.Inner.meth``;
- inherited methods ``pkg.mod.Sub.forward`` where ``forward`` is defined on a base: the wrapper is set on
  ``Sub`` itself, so calls on ``Sub`` and its subclasses are traced and other subclasses of the base are not;
- glob patterns (``fnmatch``) in any part after the module: ``diffusers.models.attention_processor.*.__call__``.
  A glob matches only names *defined* there: a class's own ``__dict__``, and a module's members whose
  ``__module__`` is that module (so re-exported names are not matched twice).

References bound by ``from mod import func`` in modules already loaded are patched too.
Names that cannot be resolved are kept with the reason (``Patcher.unresolved``), never raised.
``Patcher.remove()`` undoes every patch (calls in flight finish normally).
"""

from __future__ import annotations

import fnmatch
import importlib.abc
import importlib.machinery
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any, Iterable

from . import mirror, steps, syncs
from .wrappers import is_wrapper, wrap

_GLOB = set("*?[")
_MISSING = object()


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


@dataclass(slots=True)
class _Patch:
    owner: Any
    attr: str
    previous: Any  # the value in owner.__dict__ before, or _MISSING
    wrapper: Any


class _Pending(Exception):
    """The name needs a module that is not imported yet (``module`` names it)."""

    def __init__(self, module: str):
        self.module = module


class _Unresolved(Exception):
    pass


class Patcher:
    """Resolves qualified names and patches span wrappers in; thread-safe."""

    def __init__(self, mirror: bool = False) -> None:
        self.mirror = mirror  # also open record_function/NVTX ranges (see tracing.mirror)
        self._lock = threading.RLock()
        self._patches: list[_Patch] = []
        self._pending: dict[str, str] = {}  # name -> module awaited
        self._unresolved: dict[str, str] = {}  # name -> reason
        self._resolved: dict[str, list[str]] = {}  # requested name -> concrete names patched
        self._hook: _ImportHook | None = None
        self._callbacks: dict[str, list] = {}  # module name -> functions to call once it is imported

    # -- public ----------------------------------------------------------------------------------
    @property
    def unresolved(self) -> dict[str, str]:
        """Names that could not be resolved, with the reason; names still awaiting an import count too."""
        with self._lock:
            out = dict(self._unresolved)
            for name, mod in self._pending.items():
                parent, _, last = mod.rpartition(".")
                if mod == "__main__":
                    out[name] = "the script never defined it"
                elif parent in sys.modules:
                    out[name] = f"{parent} has no attribute or submodule {last!r}"
                else:
                    out[name] = f"module {mod!r} was never imported"
            return out

    @property
    def resolved(self) -> dict[str, list[str]]:
        """Requested name -> the concrete qualified names patched for it."""
        with self._lock:
            return {k: list(v) for k, v in self._resolved.items()}

    def add(self, names: Iterable[str]) -> None:
        """Trace ``names`` now, or when their module is imported."""
        with self._lock:
            batch: list[_Patch] = []
            for name in names:
                if name in self._resolved or name in self._pending:
                    continue
                self._try(name, batch)
            self._rebind_imports(batch)
            if self._pending and self._hook is None:
                self._hook = _ImportHook(self)
                sys.meta_path.insert(0, self._hook)

    def when_imported(self, module: str, fn) -> None:
        """Call ``fn(module)`` once ``module`` is imported (now, if it already is); never imports it."""
        with self._lock:
            mod = sys.modules.get(module)
            if mod is not None:
                fn(mod)
                return
            self._callbacks.setdefault(module, []).append(fn)
            if self._hook is None:
                self._hook = _ImportHook(self)
                sys.meta_path.insert(0, self._hook)

    def remove(self) -> None:
        """Undo every patch and drop the import hook."""
        with self._lock:
            if self._hook is not None:
                try:
                    sys.meta_path.remove(self._hook)
                except ValueError:
                    pass
                self._hook = None
            for p in reversed(self._patches):
                current = _own(p.owner, p.attr)
                if current is not p.wrapper:
                    continue  # someone replaced it since: leave theirs
                if p.previous is _MISSING:
                    try:
                        delattr(p.owner, p.attr)
                    except (AttributeError, TypeError):
                        pass
                else:
                    _set(p.owner, p.attr, p.previous)
            self._patches.clear()
            self._pending.clear()
            self._callbacks.clear()

    # -- resolution ------------------------------------------------------------------------------
    def _try(self, name: str, batch: list[_Patch]) -> None:
        try:
            concrete = self._resolve(name, batch)
        except _Pending as p:
            self._pending[name] = p.module
            return
        except _Unresolved as e:
            self._pending.pop(name, None)
            self._unresolved[name] = str(e)
            return
        self._pending.pop(name, None)
        self._unresolved.pop(name, None)
        self._resolved[name] = concrete

    def _resolve(self, name: str, batch: list[_Patch]) -> list[str]:
        parts = name.split(".")
        # the longest prefix free of glob characters that is a loaded module
        limit = next((i for i, p in enumerate(parts) if _GLOB & set(p)), len(parts))
        mod_i = 0
        for i in range(min(limit, len(parts) - 1), 0, -1):
            if ".".join(parts[:i]) in sys.modules:
                mod_i = i
                break
        if mod_i == 0:
            raise _Pending(parts[0])
        module = sys.modules[".".join(parts[:mod_i])]
        targets: list[tuple[Any, str, str]] = []  # (owner, attr, concrete name)
        self._expand(module, ".".join(parts[:mod_i]), parts[mod_i:], targets)
        if not targets:
            raise _Unresolved(f"no names match {'.'.join(parts[mod_i:])!r} in {'.'.join(parts[:mod_i])}")
        done = []
        for owner, attr, concrete in targets:
            self._patch(owner, attr, concrete, batch)
            done.append(concrete)
        return done

    def _expand(self, obj: Any, path: str, rest: list[str], out: list) -> None:
        head, tail = rest[0], rest[1:]
        if _GLOB & set(head):
            names = sorted(n for n in _defined_names(obj, path) if fnmatch.fnmatchcase(n, head))
            for n in names:
                if tail:
                    child = _own(obj, n)
                    if child is _MISSING or not isinstance(child, (type, types.ModuleType)):
                        continue
                    if tail and (_GLOB & set(tail[0])) == set() and not _has(child, tail[0]):
                        continue
                    self._expand(child, f"{path}.{n}", tail, out)
                else:
                    if callable(_raw_attr(obj, n)):
                        out.append((obj, n, f"{path}.{n}"))
            return
        if isinstance(obj, types.ModuleType):
            # only what the module has defined so far: a getattr could make a lazy package
            # (diffusers, transformers) import the submodule early; wait for its import instead
            child = _own(obj, head)
            if child is _MISSING:
                if getattr(obj, "__path__", None) is not None or path == "__main__":
                    self._missing(obj, path, head)
                child = getattr(obj, head, _MISSING)  # a module-level __getattr__
                if child is _MISSING:
                    self._missing(obj, path, head)
        else:
            child = _raw_attr(obj, head) if not tail else getattr(obj, head, _MISSING)
            if child is _MISSING:
                self._missing(obj, path, head)
        if not tail:
            out.append((obj, head, f"{path}.{head}"))
            return
        self._expand(child, f"{path}.{head}", tail, out)

    @staticmethod
    def _missing(obj: Any, path: str, attr: str):
        if isinstance(obj, types.ModuleType) and getattr(obj, "__path__", None) is not None:
            raise _Pending(f"{path}.{attr}")  # maybe a submodule not imported yet
        if path == "__main__":
            raise _Pending("__main__")  # the script has not defined it yet (see MainNamespace)
        raise _Unresolved(f"{path} has no attribute {attr!r}")

    def _patch(self, owner: Any, attr: str, concrete: str, batch: list[_Patch]) -> None:
        raw = _raw_attr(owner, attr)
        own = _own(owner, attr)
        if own is not _MISSING and is_wrapper(_unwrap_descriptor(own)):
            return  # traced already, under this or another name
        if isinstance(raw, property):
            raise _Unresolved(f"{concrete} is a property; trace its getter's function instead")
        hooks = steps.hooks_for(owner, attr) or syncs.hooks_for(owner, attr)
        if self.mirror:
            hooks = mirror.Mirror(concrete, hooks)
        op = getattr(hooks, "op", "function")
        if isinstance(raw, staticmethod):
            new = staticmethod(wrap(_unwrapped(raw.__func__), concrete, op, hooks=hooks))
        elif isinstance(raw, classmethod):
            new = classmethod(wrap(_unwrapped(raw.__func__), concrete, op, hooks=hooks))
        elif callable(raw):
            new = wrap(_unwrapped(raw), concrete, op, hooks=hooks)
        else:
            raise _Unresolved(f"{concrete} is a {type(raw).__name__}, not a function")
        try:
            _set(owner, attr, new)
        except (AttributeError, TypeError) as e:
            raise _Unresolved(f"{concrete} cannot be patched ({e})") from None
        p = _Patch(owner, attr, own, new)
        self._patches.append(p)
        if isinstance(owner, types.ModuleType) and own is not _MISSING:
            batch.append(p)

    def _rebind_imports(self, batch: list[_Patch]) -> None:
        """Replace references bound by ``from mod import func`` in other loaded modules."""
        if not batch:
            return
        by_id = {id(p.previous): p for p in batch}
        for mod in list(sys.modules.values()):
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict):
                continue
            try:
                hits = [(k, by_id[id(v)]) for k, v in d.items() if id(v) in by_id and by_id[id(v)].previous is v]
            except RuntimeError:  # dict changed size in another thread
                continue
            for k, p in hits:
                if mod is p.owner and k == p.attr:
                    continue
                d[k] = p.wrapper
                self._patches.append(_Patch(mod, k, p.previous, p.wrapper))

    def _on_import(self, module_name: str) -> None:
        with self._lock:
            for fn in self._callbacks.pop(module_name, ()):
                try:
                    fn(sys.modules[module_name])
                except Exception:  # an integration must never break the program's import
                    pass
            names = [n for n, m in self._pending.items() if n == module_name or n.startswith(module_name + ".")]
            batch: list[_Patch] = []
            for n in names:
                self._try(n, batch)
            self._rebind_imports(batch)

    def on_main_assign(self) -> None:
        """Called when the script's namespace gains a name (see ``MainNamespace``)."""
        if any(m == "__main__" for m in self._pending.values()):
            self._on_import("__main__")

    def watches(self, module_name: str) -> bool:
        with self._lock:
            return module_name in self._callbacks or any(n.startswith(module_name + ".") for n in self._pending)


def _own(obj: Any, attr: str) -> Any:
    d = getattr(obj, "__dict__", None)
    if d is None:
        return _MISSING
    try:
        return d.get(attr, _MISSING)
    except Exception:
        return _MISSING


def _has(obj: Any, attr: str) -> bool:
    return _raw_attr(obj, attr) is not _MISSING


def _raw_attr(obj: Any, attr: str) -> Any:
    """The attribute as stored (descriptors not applied): own dict first, then the MRO for classes."""
    if isinstance(obj, type):
        for klass in obj.__mro__:
            v = klass.__dict__.get(attr, _MISSING)
            if v is not _MISSING:
                return v
        return _MISSING
    v = _own(obj, attr)
    if v is _MISSING:
        v = getattr(obj, attr, _MISSING)
    return v


def _set(obj: Any, attr: str, value: Any) -> None:
    if isinstance(obj, types.ModuleType):
        obj.__dict__[attr] = value
    else:
        setattr(obj, attr, value)


def _unwrap_descriptor(v: Any) -> Any:
    return v.__func__ if isinstance(v, (staticmethod, classmethod)) else v


def _unwrapped(fn: Any) -> Any:
    """An inherited method that is traced on its base: wrap the original, not the base's wrapper."""
    while is_wrapper(fn):
        fn = fn.__wrapped__
    return fn


def _defined_names(obj: Any, path: str) -> list[str]:
    d = getattr(obj, "__dict__", None) or {}
    if isinstance(obj, types.ModuleType):
        modname = getattr(obj, "__name__", path)
        return [k for k, v in list(d.items()) if getattr(v, "__module__", None) in (path, modname)]
    return list(d.keys())


class _ImportHook(importlib.abc.MetaPathFinder):
    """Runs the patcher after a watched module executes; never imports anything itself."""

    def __init__(self, patcher: Patcher) -> None:
        self._patcher = patcher
        self._local = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if getattr(self._local, "busy", False) or not self._patcher.watches(fullname):
            return None
        self._local.busy = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._local.busy = False
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _NotifyingLoader(loader, self._patcher)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    """Executes the module with its own loader (restored on the module), then notifies the patcher."""

    def __init__(self, loader, patcher: Patcher) -> None:
        self._loader = loader
        self._patcher = patcher

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._patcher._on_import(module.__name__)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class MainNamespace(dict):
    """The local namespace a script's top-level code runs in when it traces ``__main__`` names.

    Top-level assignments (``def``, ``class``, ``import``, ``=``) go to the module's globals, and the
    patcher retries its pending ``__main__`` names after each, so functions and classes of the script
    are traced before their first call. Reads fall through to the globals.
    """

    __slots__ = ("_globals", "_patcher")

    def __init__(self, module_globals: dict, patcher: Patcher) -> None:
        super().__init__()
        self._globals = module_globals
        self._patcher = patcher

    def __setitem__(self, key, value):
        self._globals[key] = value
        self._patcher.on_main_assign()

    def __getitem__(self, key):
        return self._globals[key]

    def __delitem__(self, key):
        del self._globals[key]

    def __contains__(self, key):
        return key in self._globals

    def get(self, key, default=None):
        return self._globals.get(key, default)
