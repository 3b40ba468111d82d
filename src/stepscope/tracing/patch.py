"""Trace functions by qualified name, with no edit to the program and nothing of it replaced.

``Patcher.add(names)`` resolves each name now if its module is loaded, or when its module is imported
(an import hook that never imports anything early), and puts a ``Probe`` on the function's code through
the interpreter's mechanism (``tracing.mechanism``: ``sys.monitoring`` on 3.12+, instrumented code on
3.11). Function objects, classes and module attributes stay the same objects. Only functions without
Python code (builtins, C methods such as the ``torch.Tensor`` sync sites) are wrapped in place.

Names reach the object through any public path (package re-exports, the lazy modules of diffusers and
transformers): the span is named where the object is defined (``module.Qualname``), so
``diffusers.UNet2DConditionModel.forward`` and
``diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward`` are one span name. What it
resolves:

- module functions ``pkg.mod.func``; methods, staticmethods and classmethods ``pkg.mod.Class.meth``;
  methods of nested classes ``pkg.mod.Outer.Inner.meth``;
- inherited methods ``pkg.mod.Sub.forward`` where ``forward`` is defined on a base: calls whose ``self``
  is a ``Sub`` (or a subclass of it) are traced, others of the base are not; nothing is set on ``Sub``;
- overridden methods: a name of a method that subclasses override (an abstract ``Base.invoke``) traces
  each override too, as a span named after the class that defines it (``pkg.nodes.Compel.invoke``), and
  the method itself for the calls that reach it; subclasses that appear later (a module imported later
  defines them) are looked for after each import of a module of the base's package or of a package that
  holds one of its subclasses. The run's notes say so ("overridden in N subclasses ...", ``unresolved``);
- glob patterns (``fnmatch``) in any part after the module: ``diffusers.models.attention_processor.*.__call__``,
  ``app.invocations.*.*.invoke`` (see ``_members`` for the rule). In a module a glob matches what the
  module defines (members whose ``__module__`` is that module) and its submodules; in a class, the
  methods the class has through its MRO that come from the class itself or from classes of the class's
  own top-level package: a node made by a decorator that returns a same-named subclass has its
  ``invoke``, a ``torch.nn.Module`` subclass does not get every ``Module`` method. A method reached
  through a base is traced for the matched class only (``Probe.by_class``) under its name. A class
  matched by a glob's last part is expanded to those methods. A glob over a package goes on matching:
  each submodule imported later is matched as it is imported. A glob that matches nothing says what it
  saw ("4 classes seen (...), none defines or inherits invoke"). Overrides are not followed for globs.

Names that cannot be resolved are kept with the reason and the nearest existing names
(``Patcher.unresolved``), never raised. ``Patcher.remove()`` undoes everything (calls in flight finish
normally).
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Iterable

from . import mirror, probes, steps, syncs
from .mechanism import CannotInstrument, choose
from .probes import Probe
from .wrappers import is_wrapper, wrap

_GLOB = set("*?[")
_MISSING = object()
_OWN_PACKAGE = __name__.partition(".")[0]  # "stepscope"


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


@dataclass(slots=True)
class _Seen:
    """What a glob walked, for the message when it matches nothing: module paths, class paths, and
    matching names that a class has from another package's class (left out by ``_members``)."""

    modules: dict = field(default_factory=dict)  # path -> None (an ordered set)
    classes: dict = field(default_factory=dict)  # path -> class qualname
    foreign: dict = field(default_factory=dict)  # "Cls.meth" -> the defining class's module.qualname


@dataclass(slots=True)
class _LiveGlob:
    """A glob over a package: submodules imported later are matched as they are imported."""

    prefix: str  # the package the glob starts in
    rest: list  # the pattern's parts after it
    seen: _Seen
    done: dict = field(default_factory=dict)  # concrete name -> the value tried for it (a module reloaded: new ones)


@dataclass(slots=True)
class _LiveOverrides:
    """A traced method whose subclasses' overrides are traced too (looked for again after imports)."""

    cls: type
    attr: str
    packages: set  # top-level packages whose imports are watched: the base's, and those of its subclasses
    overrides: list = field(default_factory=list)  # the overrides' concrete names, in the order found


#: every function traced by a live Patcher -> its probe (one probe per function per process)
_TRACED: dict = {}


def is_traced(fn: Any) -> bool:
    """True while ``fn`` (a function, method, or a wrapper of one) is traced by stepscope."""
    inner = _function_of(fn)
    return (inner is not None and inner in _TRACED) or is_wrapper(_unwrap_descriptor(fn))


class Patcher:
    """Resolves qualified names and puts probes on them (wraps builtins in place); thread-safe."""

    def __init__(self, mirror: bool = False, track_open: bool = False) -> None:
        self.mirror = mirror  # also open record_function/NVTX ranges (see tracing.mirror)
        #: with ``track_open``: the traced calls open now, span id -> (open-span record, thread ident), kept by
        #: ``probes.TrackingProbe`` (a capture window stores those still running at its end, cut there)
        self.live: dict | None = {} if track_open else None
        self._lock = threading.RLock()
        self._patches: list[_Patch] = []
        self._pending: dict[str, str] = {}  # name -> module awaited
        self._unresolved: dict[str, str] = {}  # name -> reason
        self._resolved: dict[str, list[str]] = {}  # requested name -> concrete names patched
        self._hook: _ImportHook | None = None
        self._callbacks: dict[str, list] = {}  # module name -> functions to call once it is imported
        self._mechanism = None  # made on first use (takes a sys.monitoring tool id)
        self._traced: dict[Any, Probe] = {}  # function -> its probe
        self._live: dict[str, Any] = {}  # requested name -> _LiveGlob | _LiveOverrides (resolved again on imports)

    @property
    def mechanism(self):
        """The tracing mechanism in use (``tracing.mechanism``)."""
        if self._mechanism is None:
            self._mechanism = choose(every_call=self.live is not None)
        return self._mechanism

    # -- public ----------------------------------------------------------------------------------
    @property
    def unresolved(self) -> dict[str, str]:
        """Names that could not be resolved, with the reason; names still awaiting an import count too."""
        with self._lock:
            out = dict(self._unresolved)
            for name, mod in self._pending.items():
                parent, _, last = mod.rpartition(".")
                if mod == "__main__":
                    out[name] = "the script does not define it"
                elif parent in sys.modules:
                    pmod = sys.modules[parent]
                    lazy = _own(pmod, "_class_to_module")
                    if isinstance(lazy, dict) and last in lazy:
                        out[name] = f"{parent}.{last} was never imported by the program"
                    else:
                        out[name] = f"{parent} has no attribute or submodule {last!r}" + _did_you_mean(
                            pmod, last, parent + ".", name[len(mod):])
                else:
                    out[name] = f"module {mod!r} was never imported"
            for name, live in self._live.items():
                if isinstance(live, _LiveOverrides) and live.overrides:
                    out.setdefault(name, _overrides_note(live))
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
                if name in self._resolved or name in self._pending or name in self._live:
                    continue
                self._try(name, batch)
            self._rebind_imports(batch)
            if (self._pending or self._live) and self._hook is None:
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

    def note(self, name: str, why: str) -> None:
        """Keep a note about a traced name (reported with ``unresolved``), e.g. a span that a device
        profiler could not mirror."""
        with self._lock:
            self._unresolved.setdefault(name, why)

    def _new_probe(self, *args, **kw) -> Probe:
        """A new probe (a ``TrackingProbe`` that keeps ``live`` when the calls open are tracked)."""
        if self.live is not None:
            return probes.TrackingProbe(*args, live=self.live, **kw)
        return Probe(*args, **kw)

    def forked(self) -> None:
        """In a forked child that records nothing: a fresh lock (the parent's may have been held by a thread the
        child does not have), then every patch undone."""
        self._lock = threading.RLock()
        self.remove()

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
            for fn, probe in self._traced.items():
                try:
                    self.mechanism.untrace(fn)
                except Exception:
                    pass
                probe.forget()
                _TRACED.pop(fn, None)
            self._traced.clear()
            if self._mechanism is not None:
                self._mechanism.close()
                self._mechanism = None
            self._pending.clear()
            self._callbacks.clear()
            self._live.clear()

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
        where = ".".join(parts[:mod_i])
        module = sys.modules[where]
        rest = parts[mod_i:]
        targets: list[tuple[Any, str, str]] = []  # (owner, attr, concrete name)
        seen = _Seen()
        self._expand(module, where, rest, targets, seen)
        if limit < len(parts) and getattr(module, "__path__", None) is not None:  # a glob over a package
            live = _LiveGlob(where, rest, seen, {t[2]: _raw_attr(t[0], t[1]) for t in targets})
            self._live[name] = live
        if not targets:
            raise _Unresolved(_nothing_matched(rest, where, seen))
        done = self._patch_all(name, targets, batch)
        if limit == len(parts) and isinstance(targets[0][0], type):  # a method by name: its overrides too
            owner, attr, _ = targets[0]
            fn = _function_of(_raw_attr(owner, attr))
            if fn is not None and fn in self._traced:
                live = _LiveOverrides(owner, attr, {_top(owner)})
                self._live[name] = live
                done += self._scan_overrides(live)
        return done

    def _patch_all(self, name: str, targets: list, batch: list[_Patch]) -> list[str]:
        """Patch ``targets`` for ``name``; the concrete names done. Those that fail are kept under
        ``name (in part)``; raises _Unresolved when none could be patched."""
        done = []
        errors = []
        for owner, attr, concrete in targets:
            try:
                self._patch(owner, attr, concrete, batch)
            except _Unresolved as e:
                if len(targets) == 1 and name not in self._resolved:
                    raise
                errors.append(f"{concrete}: {e}")
                continue
            done.append(concrete)
        if errors:
            key = name + " (in part)"
            self._unresolved[key] = "; ".join(filter(None, [self._unresolved.get(key)] + errors))
        if not done and name not in self._resolved:
            raise _Unresolved("; ".join(errors))
        return done

    def _grow(self, name: str, live: _LiveGlob, module_name: str, batch: list[_Patch]) -> None:
        """A module of a live glob's package was imported: match the glob in it."""
        rel = module_name[len(live.prefix) + 1:].split(".")
        if len(rel) >= len(live.rest) or not all(fnmatch.fnmatchcase(r, p) for r, p in zip(rel, live.rest)):
            return
        module = sys.modules.get(module_name)
        if module is None:
            return
        targets: list = []
        try:
            self._expand(module, module_name, live.rest[len(rel):], targets, live.seen)
        except (_Pending, _Unresolved):
            pass  # (this module has no such member: nothing of it matches)
        targets = [t for t in targets if live.done.get(t[2], _MISSING) is not _raw_attr(t[0], t[1])]
        live.done.update({t[2]: _raw_attr(t[0], t[1]) for t in targets})
        try:
            done = self._patch_all(name, targets, batch) if targets else []
        except _Unresolved as e:
            self._unresolved[name] = str(e)
            return
        if done:
            self._unresolved.pop(name, None)
            have = self._resolved.setdefault(name, [])
            have.extend(c for c in done if c not in have)
        elif name not in self._resolved:
            self._unresolved[name] = _nothing_matched(live.rest, live.prefix, live.seen)

    def _scan_overrides(self, live: _LiveOverrides) -> list[str]:
        """Trace the overrides of ``live.attr`` in ``live.cls``'s subclasses not traced yet; their names.
        An override is a Python function (a static or class method's too) in a subclass's own ``__dict__``;
        stepscope's own classes are left out."""
        new = []
        for sub in _subclasses(live.cls):
            top = _top(sub)
            if top == _OWN_PACKAGE:
                continue
            live.packages.add(top)
            v = _own(sub, live.attr)
            fn = _function_of(v, glob=True) if v is not _MISSING else None
            if fn is None or fn in self._traced or fn in _TRACED:
                continue  # not an override, not Python code, or traced already
            mod, qual = getattr(sub, "__module__", None), getattr(sub, "__qualname__", None)
            concrete = f"{mod}.{qual}.{live.attr}" if isinstance(mod, str) and isinstance(qual, str) else \
                f"{getattr(sub, '__name__', '?')}.{live.attr}"
            try:
                hooks = steps.hooks_for(sub, live.attr)
            except Exception:  # a class with an odd __module__
                hooks = None
            try:
                self._probe(sub, live.attr, fn, _raw_attr(sub, live.attr), hooks, concrete)
            except _Unresolved:
                continue
            live.overrides.append(concrete)
            new.append(concrete)
        return new

    def _expand(self, obj: Any, path: str, rest: list[str], out: list, seen: _Seen) -> None:
        head, tail = rest[0], rest[1:]
        if _GLOB & set(head):
            if isinstance(obj, type):
                seen.classes[path] = getattr(obj, "__qualname__", path)
            else:
                seen.modules[path] = None
            members = _glob_members(obj, path)
            for n in sorted(k for k in members if fnmatch.fnmatchcase(k, head)):
                child = members[n]
                if tail:
                    if isinstance(child, types.ModuleType):
                        if not (_GLOB & set(tail[0])) and _peek(child, tail[0]) is _MISSING:
                            seen.modules[f"{path}.{n}"] = None
                            continue
                    elif isinstance(child, type):
                        if not (_GLOB & set(tail[0])):
                            if len(tail) == 1:
                                seen.classes[f"{path}.{n}"] = getattr(child, "__qualname__", n)
                            if tail[0] not in _members(child):
                                _note_foreign(child, tail[0], seen)
                                continue
                    else:
                        continue
                    self._expand(child, f"{path}.{n}", tail, out, seen)
                elif isinstance(child, type):  # a class: its methods (``_members``), never the class itself
                    seen.classes[f"{path}.{n}"] = getattr(child, "__qualname__", n)
                    for m, v in _members(child).items():
                        if _function_of(v, glob=True) is not None:
                            out.append((child, m, f"{path}.{n}.{m}"))
                elif not isinstance(child, types.ModuleType) and _function_of(child, glob=True) is not None:
                    out.append((obj, n, f"{path}.{n}"))
            if isinstance(obj, type):
                _note_foreign(obj, head, seen)
            return
        if isinstance(obj, types.ModuleType):
            # only what the module has defined so far: a getattr could make a lazy package
            # (diffusers, transformers) import the submodule early; wait for its import instead
            child = _peek(obj, head)
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
        self._expand(child, f"{path}.{head}", tail, out, seen)

    @staticmethod
    def _missing(obj: Any, path: str, attr: str):
        if isinstance(obj, types.ModuleType) and getattr(obj, "__path__", None) is not None:
            raise _Pending(f"{path}.{attr}")  # maybe a submodule not imported yet
        if path == "__main__":
            raise _Pending("__main__")  # the script has not defined it yet
        if isinstance(obj, types.ModuleType) and getattr(getattr(obj, "__spec__", None), "_initializing", False):
            raise _Pending(f"{path}.{attr}")  # still executing (a retry from a nested import): wait for it
        raise _Unresolved(f"{path} has no attribute {attr!r}"
                         + _did_you_mean(obj, attr, path + "." if isinstance(obj, types.ModuleType)
                                        else path.rsplit(".", 1)[-1] + "."))

    def _patch(self, owner: Any, attr: str, concrete: str, batch: list[_Patch]) -> None:
        raw = _raw_attr(owner, attr)
        own = _own(owner, attr)
        if own is not _MISSING and is_wrapper(_unwrap_descriptor(own)):
            return  # wrapped already, under this or another name
        if isinstance(raw, property):
            raise _Unresolved(f"{concrete} is a property; trace its getter's function instead")
        hooks = steps.hooks_for(owner, attr) or syncs.hooks_for(owner, attr)
        fn = _function_of(raw)
        if fn is not None and not isinstance(hooks, syncs.SyncSite):
            self._probe(owner, attr, fn, raw, hooks, concrete)
            return
        if not callable(raw):
            raise _Unresolved(f"{concrete} is a {type(raw).__name__}, not a function")
        if isinstance(raw, type):
            raise _Unresolved(f"{concrete} is a class; trace its methods ({concrete}.__init__, {concrete}.forward ...)")
        self._wrap(owner, attr, raw, own, hooks, concrete, batch)

    def _probe(self, owner, attr, fn, raw, hooks, concrete: str) -> None:
        """Put a probe on ``fn`` (the Python function behind ``owner.attr``)."""
        name = _canonical(owner, attr, fn, concrete)
        inherited = isinstance(owner, type) and attr not in vars(owner) and not isinstance(raw, staticmethod)
        if fn in _TRACED and fn not in self._traced:
            return  # traced by another live session in this process: its spans land in the same buffer
        existing = self._traced.get(fn)
        if existing is not None:  # one function reached by several names
            if inherited:
                if existing.by_class is None:
                    existing.by_class = []
                if all(c is not owner for c, _ in existing.by_class):
                    existing.by_class.insert(0, (owner, name))
                    existing.by_class.sort(key=lambda cn: -len(cn[0].__mro__))  # most derived first
            elif existing.name is None:  # traced so far through subclasses only
                existing.name = name
            return
        if self.mirror:
            hooks = mirror.Mirror(name, hooks)
        code = fn.__code__
        generator = bool(code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR))
        probe = self._new_probe(None if inherited else name, hooks=hooks, by_class=[(owner, name)] if inherited else None,
                                generator=generator, code=code)
        try:
            self.mechanism.trace(fn, probe)
        except CannotInstrument as e:
            probe.forget()
            raise _Unresolved(str(e)) from None
        self._traced[fn] = probe
        _TRACED[fn] = probe

    def _wrap(self, owner, attr, raw, own, hooks, concrete: str, batch: list[_Patch]) -> None:
        """A callable without Python code (a builtin, a C method): wrapped in place."""
        if self.mirror:
            hooks = mirror.Mirror(concrete, hooks)
        op = getattr(hooks, "op", "function")
        if isinstance(raw, staticmethod):
            new = staticmethod(wrap(_unwrapped(raw.__func__), concrete, op, hooks=hooks))
        elif isinstance(raw, classmethod):
            new = classmethod(wrap(_unwrapped(raw.__func__), concrete, op, hooks=hooks))
        else:
            new = wrap(_unwrapped(raw), concrete, op, hooks=hooks)
        try:
            _set(owner, attr, new)
        except (AttributeError, TypeError) as e:
            raise _Unresolved(f"{concrete} cannot be patched ({e})") from None
        p = _Patch(owner, attr, own, new)
        self._patches.append(p)
        if isinstance(owner, types.ModuleType) and own is not _MISSING:
            batch.append(p)

    def compile_main(self, source: str, filename: str):
        """The script's code (``compile(..., dont_inherit=True)``), with its functions named by pending
        ``__main__.`` names traced: matched by qualname (``__main__.f``, ``__main__.Cls.method``, globs)
        before the script runs, so nothing of the script's namespace changes. Raises SyntaxError."""
        import ast

        from .codeswap import has_own_yield, iter_defs

        with self._lock:
            wanted = [n for n, m in self._pending.items() if m == "__main__"]
            if not wanted:
                return compile(source, filename, "exec", dont_inherit=True)
            tree = ast.parse(source, filename)
            defs: dict[str, Probe] = {}
            hit: dict[str, list[str]] = {}
            for qual, node in iter_defs(tree):
                for name in wanted:
                    pattern = name[len("__main__."):].split(".")
                    parts = qual.split(".")
                    if len(parts) == len(pattern) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pattern)):
                        if qual not in defs:
                            generator = isinstance(node, ast.AsyncFunctionDef) or has_own_yield(node)
                            hooks = mirror.Mirror(f"__main__.{qual}") if self.mirror else None
                            defs[qual] = self._new_probe(f"__main__.{qual}", hooks=hooks, generator=generator)
                        hit.setdefault(name, []).append(f"__main__.{qual}")
            code = self.mechanism.compile_main(source, filename, defs)
            for name, concrete in hit.items():
                self._pending.pop(name, None)
                self._resolved[name] = concrete
            for qual, probe in defs.items():
                self._traced[("__main__", qual)] = probe
            return code

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
            top = module_name.partition(".")[0]
            # a name in this package may be a re-export that this import made reachable (lazy modules)
            names = [n for n, m in self._pending.items() if n == module_name or n.startswith(module_name + ".")
                     or (n.partition(".")[0] == top and _lazy_parent(m))]
            batch: list[_Patch] = []
            for n in names:
                self._try(n, batch)
            for n, live in list(self._live.items()):  # globs over packages, overridden methods
                try:
                    if isinstance(live, _LiveGlob):
                        if module_name.startswith(live.prefix + "."):
                            self._grow(n, live, module_name, batch)
                    else:
                        new = self._scan_overrides(live)
                        if new:
                            self._resolved.setdefault(n, []).extend(new)
                except Exception:  # never into the program's import
                    pass
            self._rebind_imports(batch)

    def watches(self, module_name: str) -> bool:
        with self._lock:
            if module_name in self._callbacks:
                return True
            top = module_name.partition(".")[0]
            if any(n.startswith(module_name + ".") or n.partition(".")[0] == top for n in self._pending):
                return True
            for live in self._live.values():
                if module_name.startswith(live.prefix + ".") if isinstance(live, _LiveGlob) else top in live.packages:
                    return True
            return False


def _function_of(v: Any, glob: bool = False) -> types.FunctionType | None:
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
                return v if not is_wrapper(v) else _function_of(v.__wrapped__, glob)
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


def _canonical(owner: Any, attr: str, fn: Any, concrete: str) -> str:
    """The span name: where the object is defined (``module.Qualname``), whatever path named it."""
    if isinstance(owner, type):
        mod, qual = getattr(owner, "__module__", None), getattr(owner, "__qualname__", None)
        if isinstance(mod, str) and isinstance(qual, str) and "<locals>" not in qual:
            return f"{mod}.{qual}.{attr}"
        return concrete
    raw = _raw_attr(owner, attr)
    mod, qual = getattr(raw, "__module__", None), getattr(raw, "__qualname__", None)
    if isinstance(mod, str) and isinstance(qual, str) and "<locals>" not in qual and mod in sys.modules:
        return f"{mod}.{qual}"
    return concrete


def _peek(module: types.ModuleType, name: str) -> Any:
    """``module.name`` without importing anything: the module's own attribute, or a lazy module's
    (diffusers, transformers ``_LazyModule``) re-export whose defining submodule is already loaded."""
    for _ in range(16):
        v = _own(module, name)
        if v is not _MISSING:
            return v
        mapping = _own(module, "_class_to_module")  # never getattr: a module __getattr__ may import
        if not isinstance(mapping, dict) or name not in mapping:
            return _MISSING
        sub = sys.modules.get(f"{module.__name__}.{mapping[name]}")
        if sub is None:
            return _MISSING
        module = sub
    return _MISSING


def _did_you_mean(obj: Any, attr: str, prefix: str = "", suffix: str = "") -> str:
    """``"; did you mean X?"`` with the nearest names of ``obj`` (never imports anything), or ""."""
    try:
        names = [n for n in (list(getattr(obj, "__dict__", {}) or {}) + list(dir(obj))) if isinstance(n, str)]
    except Exception:
        return ""
    mapping = _own(obj, "_class_to_module")
    if isinstance(mapping, dict):
        names += [n for n in mapping if isinstance(n, str)]
    close = difflib.get_close_matches(attr, sorted(set(names)), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(prefix + c + suffix for c in close) + "?"


def _lazy_parent(awaited: str) -> bool:
    """The awaited name's parent is a lazy module (its re-exports appear as their submodules load)."""
    parent = sys.modules.get(awaited.rpartition(".")[0])
    return parent is not None and isinstance(_own(parent, "_class_to_module"), dict)




def _own(obj: Any, attr: str) -> Any:
    d = getattr(obj, "__dict__", None)
    if d is None:
        return _MISSING
    try:
        return d.get(attr, _MISSING)
    except Exception:
        return _MISSING


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


def _module_of(v: Any) -> Any:
    """``v.__module__``, or None (never raises: a lazy proxy's attribute access may)."""
    try:
        return getattr(v, "__module__", None)
    except Exception:
        return None


def _top(obj: Any) -> str:
    """The top-level package of a class (of its ``__module__``), or of a module name."""
    mod = obj if isinstance(obj, str) else _module_of(obj)
    return mod.partition(".")[0] if isinstance(mod, str) else ""


def _members(cls: type) -> dict[str, Any]:
    """The attributes a glob sees on ``cls``: name -> the value as stored (descriptors not applied).

    The rule: an attribute counts as the class has it through its MRO (the first class of the MRO that
    defines it), when that class is ``cls`` itself or a class of ``cls``'s own top-level package
    (``app`` for ``app.invocations.compel.Compel``), never ``object`` nor a builtin type. So a node that a
    decorator made as a same-named subclass of the user's class has the user's ``invoke``, and the app's
    own base classes count, while what comes from another package's classes (``torch.nn.Module.to``,
    pydantic's ``BaseModel`` methods, ``enum.Enum``'s) is the framework's plumbing and is left out: name it
    in full (``app.models.Net.to``) to trace it on that class."""
    top = _top(cls)
    out: dict[str, Any] = {}
    taken: set = set()
    for klass in getattr(cls, "__mro__", (cls,)):
        d = getattr(klass, "__dict__", None)
        if d is None:
            continue
        ours = klass is cls or (klass is not object and top not in ("", "builtins") and _top(klass) == top)
        for k, v in list(d.items()):
            if k in taken:
                continue
            taken.add(k)
            if ours:
                out[k] = v
    return out


def _glob_members(obj: Any, path: str) -> dict[str, Any]:
    """What a glob part matches in ``obj``: a module's members whose ``__module__`` is the module, and its
    submodules that are loaded (also those still executing); a class's ``_members``."""
    if isinstance(obj, type):
        return _members(obj)
    d = getattr(obj, "__dict__", None) or {}
    if not isinstance(obj, types.ModuleType):
        return dict(d)
    modname = getattr(obj, "__name__", path)
    out = {}
    for k, v in list(d.items()):
        if isinstance(v, types.ModuleType):
            if getattr(v, "__name__", None) in (f"{path}.{k}", f"{modname}.{k}"):
                out[k] = v
        elif _module_of(v) in (path, modname):
            out[k] = v
    if getattr(obj, "__path__", None) is not None:  # submodules not bound on the package yet
        for full in [m for m in list(sys.modules) if m.startswith(modname + ".")]:
            k = full[len(modname) + 1:]
            if "." not in k and k not in out and sys.modules.get(full) is not None:
                out[k] = sys.modules[full]
    return out


def _note_foreign(cls: type, pattern: str, seen: _Seen) -> None:
    """Keep in ``seen`` the methods matching ``pattern`` that ``cls`` has from another package's class."""
    ours = _members(cls)
    for klass in getattr(cls, "__mro__", ())[1:]:
        for k, v in list(getattr(klass, "__dict__", {}).items()):
            if k not in ours and fnmatch.fnmatchcase(k, pattern) and _function_of(v, glob=True) is not None:
                key = f"{getattr(cls, '__qualname__', '?')}.{k}"
                if len(seen.foreign) < 8:
                    seen.foreign.setdefault(key, f"{klass.__module__}.{klass.__qualname__}")


def _nothing_matched(rest: list[str], where: str, seen: _Seen) -> str:
    """Why a glob matched nothing, with what it saw."""
    msg = f"no functions match {'.'.join(rest)!r} in {where}"
    last = rest[-1]
    target = f"a method matching {last!r}" if _GLOB & set(last) else last
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
        target = f"a function or class matching {last!r}" if _GLOB & set(last) else last
        msg += f": {len(modules)} module{'s' if len(modules) != 1 else ''} seen ({shown}), none defines {target}"
    else:
        msg += f": nothing defined in {where} matches {rest[0]!r}"
    return msg


def _subclasses(cls: type) -> list[type]:
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


def _overrides_note(live: _LiveOverrides) -> str:
    n = len(live.overrides)
    shown = ", ".join(live.overrides[:4]) + (", ..." if n > 4 else "")
    return (f"overridden in {n} subclass{'es' if n != 1 else ''}: each override traced as a span of its own"
            f" class ({shown})")


#: how the reasons of notes about traced names begin (``Patcher.unresolved`` holds both: these are not failures)
NOTE_PREFIXES = ("overridden in ", "inside a compiled region", "not mirrored")


def is_note(why: str) -> bool:
    """Whether an entry of ``Patcher.unresolved`` / a run's ``unresolved`` is a note about a name that is
    traced (its overrides, a compiled region, an unmirrored span), not a name that could not be traced."""
    return isinstance(why, str) and why.startswith(NOTE_PREFIXES)


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
