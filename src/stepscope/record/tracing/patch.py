"""Trace functions by qualified name, with no edit to the program and nothing of it replaced.

``Patcher.add(names)`` resolves each name (``tracing.targets``: from a name to the attributes it reaches) now if its
module is loaded, or when its module is imported (an import hook that never imports anything early), keeps what
it resolved, waits for or gave up on, and puts a ``Probe`` on the function's code through
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
  ``app.invocations.*.*.invoke`` (see ``globs.class_members`` for the rule). In a module a glob matches what the
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

import contextlib
import fnmatch
import inspect
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any, Iterable

from . import collectives, mirror, probes, syncs
from ..spans import labels
from ..steps import hooks as steps
from .globs import LiveGlob, LiveOverrides, Seen, members_note, nothing_matched, overrides_note, subclasses
from .globs import is_note  # noqa: F401 (re-exported: api, control)
from .importhook import ImportHook
from .mechanism import CannotInstrument, choose
from .probes import Probe
from .targets import expand, locate
from .resolve import (MISSING, Pending, Unresolved, canonical, did_you_mean, function_of, lazy_parent, own_attr,
                      raw_attr, top_package)
from .wrappers import is_wrapper, wrap

_OWN_PACKAGE = __name__.partition(".")[0]  # "stepscope"


@dataclass(slots=True)
class _Patch:
    owner: Any
    attr: str
    previous: Any  # the value in owner.__dict__ before, or MISSING
    wrapper: Any


#: every function traced by a live Patcher -> its probe (one probe per function per process)
_TRACED: dict = {}


def is_traced(fn: Any) -> bool:
    """True while ``fn`` (a function, method, or a wrapper of one) is traced by stepscope."""
    inner = function_of(fn)
    return (inner is not None and inner in _TRACED) or is_wrapper(_unwrap_descriptor(fn))


class Patcher:
    """Resolves qualified names and puts probes on them (wraps builtins in place); thread-safe."""

    def __init__(self, mirror: bool = False, track_open: bool = False, step_names: Iterable[str] = (),
                 labels: dict[str, str] | None = None) -> None:
        self.mirror = mirror  # also open record_function/NVTX ranges (see tracing.mirror)
        #: ``--step`` names (globs): each call is one step (``steps.hooks.StepMarker``)
        self.step_names = tuple(step_names)
        #: name (glob) -> label template: the span is named from the call's arguments (``tracing.labels``)
        self.labels = dict(labels or {})
        #: an app preset's names (``apps.Preset``): name -> facts function, name -> op
        self.facts: dict = {}
        self.ops: dict = {}
        #: with ``track_open``: the traced calls open now, span id -> (open-span record, thread ident), kept by
        #: ``probes.TrackingProbe`` (a capture window stores those still running at its end, cut there)
        self.live: dict | None = {} if track_open else None
        self._lock = threading.RLock()
        self._patches: list[_Patch] = []
        self._pending: dict[str, str] = {}  # name -> module awaited
        self._unresolved: dict[str, str] = {}  # name -> reason
        self._failed: dict[str, dict] = {}  # a glob -> its members that could not be traced (concrete -> reason)
        self._resolved: dict[str, list[str]] = {}  # requested name -> concrete names patched
        self._hook: ImportHook | None = None
        self._callbacks: dict[str, list] = {}  # module name -> functions to call once it is imported
        self._mechanism = None  # made on first use (takes a sys.monitoring tool id)
        self._traced: dict[Any, Probe] = {}  # function -> its probe
        self._where: dict[str, list] = {}  # a `__main__` span name -> [file, line] (its function is made later)
        self._live: dict[str, Any] = {}  # requested name -> LiveGlob | LiveOverrides (resolved again on imports)
        self._quiet: set[str] = set()  # names added quietly: never in ``unresolved``

    @property
    def mechanism(self):
        """The tracing mechanism in use (``tracing.mechanism``)."""
        if self._mechanism is None:
            self._mechanism = choose(every_call=self.live is not None)
        return self._mechanism

    # -- public ----------------------------------------------------------------------------------
    def code_locations(self) -> dict[str, list]:
        """Span name -> ``[file, first line]`` of each function traced (``code.file.path``, ``code.line.number``)."""
        with self._lock:
            found = {n: [f.__code__.co_filename, f.__code__.co_firstlineno] for f, p in self._traced.items()
                     for n in [p.name, *(c[1] for c in p.by_class or ())] if n and hasattr(f, "__code__")}
            return {**self._where, **found}

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
                    lazy = own_attr(pmod, "_class_to_module")
                    if isinstance(lazy, dict) and last in lazy:
                        out[name] = f"{parent}.{last} was never imported by the program"
                    else:
                        out[name] = f"{parent} has no attribute or submodule {last!r}" + did_you_mean(
                            pmod, last, parent + ".", name[len(mod):])
                else:
                    out[name] = f"module {mod!r} was never imported"
            for name, live in self._live.items():
                if isinstance(live, LiveOverrides) and live.overrides:
                    out.setdefault(name, overrides_note(live))
            for name in self._quiet:
                out.pop(name, None)
                out.pop(name + " (in part)", None)
            return out

    @property
    def overrides(self) -> dict[str, list[str]]:
        """A traced method's name -> the span names of every override traced with it (its note names 4)."""
        with self._lock:
            return {n: list(v.overrides) for n, v in self._live.items() if isinstance(v, LiveOverrides) and v.overrides}

    @property
    def resolved(self) -> dict[str, list[str]]:
        """Requested name -> the concrete qualified names patched for it."""
        with self._lock:
            return {k: list(v) for k, v in self._resolved.items()}

    def add(self, names: Iterable[str], quiet: bool = False) -> None:
        """Trace ``names`` now, or when their module is imported. ``quiet``: never report them in ``unresolved``
        (stepscope's own rules: a program that does not use them is told nothing)."""
        with self._lock:
            names = list(names)
            if quiet:
                self._quiet.update(n for n in names if n not in self._resolved and n not in self._pending
                                   and n not in self._live)
            batch: list[_Patch] = []
            for name in names:
                if name in self._resolved or name in self._pending or name in self._live:
                    continue
                self._try(name, batch)
            self._rebind_imports(batch)
            if (self._pending or self._live) and self._hook is None:
                self._hook = ImportHook(self)
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
                self._hook = ImportHook(self)
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
                with contextlib.suppress(ValueError):
                    sys.meta_path.remove(self._hook)
                self._hook = None
            for p in reversed(self._patches):
                current = own_attr(p.owner, p.attr)
                if current is not p.wrapper:
                    continue  # someone replaced it since: leave theirs
                if p.previous is MISSING:
                    with contextlib.suppress(AttributeError, TypeError):
                        delattr(p.owner, p.attr)
                else:
                    _set(p.owner, p.attr, p.previous)
            self._patches.clear()
            for fn, probe in self._traced.items():
                with contextlib.suppress(Exception):
                    self.mechanism.untrace(fn)
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
        except Pending as p:
            self._pending[name] = p.module
            return
        except Unresolved as e:
            self._pending.pop(name, None)
            self._unresolved[name] = str(e)
            return
        self._pending.pop(name, None)
        self._unresolved.pop(name, None)
        self._resolved[name] = concrete

    def _resolve(self, name: str, batch: list[_Patch]) -> list[str]:
        module, where, rest, globbed = locate(name)
        targets: list[tuple[Any, str, str]] = []  # (owner, attr, concrete name)
        seen = Seen()
        expand(module, where, rest, targets, seen)
        if globbed and getattr(module, "__path__", None) is not None:  # a glob over a package
            live = LiveGlob(where, rest, seen, {t[2]: raw_attr(t[0], t[1]) for t in targets})
            self._live[name] = live
        if not targets:
            raise Unresolved(nothing_matched(rest, where, seen))
        done = self._patch_all(name, targets, batch)
        if not globbed and isinstance(targets[0][0], type):  # a method by name: its overrides too
            owner, attr, _ = targets[0]
            fn = function_of(raw_attr(owner, attr))
            if fn is not None and fn in self._traced:
                live = LiveOverrides(owner, attr, {top_package(owner)})
                self._live[name] = live
                done += self._scan_overrides(live)
        return done

    def _patch_all(self, name: str, targets: list, batch: list[_Patch]) -> list[str]:
        """Patch ``targets`` for ``name``; the concrete names done. Those that fail are kept under
        ``name (in part)``; raises Unresolved when none could be patched."""
        done = []
        failed = self._failed.setdefault(name, {})
        for owner, attr, concrete in targets:
            try:
                self._patch(owner, attr, concrete, batch)
            except Unresolved as e:
                if len(targets) == 1 and name not in self._resolved and not failed:
                    raise
                failed[concrete] = str(e)
                continue
            done.append(concrete)
        if not done and name not in self._resolved:  # (one count, never the list of members: globs.members_note)
            raise Unresolved(members_note(failed, matched_any=False))
        if failed:
            self._unresolved[name + " (in part)"] = members_note(failed)
        return done

    def _grow(self, name: str, live: LiveGlob, module_name: str, batch: list[_Patch]) -> None:
        """A module of a live glob's package was imported: match the glob in it."""
        rel = module_name[len(live.prefix) + 1:].split(".")
        if len(rel) >= len(live.rest) or not all(fnmatch.fnmatchcase(r, p) for r, p in zip(rel, live.rest)):
            return
        module = sys.modules.get(module_name)
        if module is None:
            return
        targets: list = []
        with contextlib.suppress(Pending, Unresolved):  # (this module has no such member: nothing of it matches)
            expand(module, module_name, live.rest[len(rel):], targets, live.seen)
        targets = [t for t in targets if live.done.get(t[2], MISSING) is not raw_attr(t[0], t[1])]
        live.done.update({t[2]: raw_attr(t[0], t[1]) for t in targets})
        try:
            done = self._patch_all(name, targets, batch) if targets else []
        except Unresolved as e:
            self._unresolved[name] = str(e)
            return
        if done:
            self._unresolved.pop(name, None)
            have = self._resolved.setdefault(name, [])
            have.extend(c for c in done if c not in have)
        elif name not in self._resolved:
            self._unresolved[name] = nothing_matched(live.rest, live.prefix, live.seen)

    def _scan_overrides(self, live: LiveOverrides) -> list[str]:
        """Trace the overrides of ``live.attr`` in ``live.cls``'s subclasses not traced yet; their names.
        An override is a Python function (a static or class method's too) in a subclass's own ``__dict__``;
        stepscope's own classes are left out."""
        new = []
        for sub in subclasses(live.cls):
            top = top_package(sub)
            if top == _OWN_PACKAGE:
                continue
            live.packages.add(top)
            v = own_attr(sub, live.attr)
            fn = function_of(v, glob=True) if v is not MISSING else None
            if fn is None or fn in self._traced or fn in _TRACED:
                continue  # not an override, not Python code, or traced already
            mod, qual = getattr(sub, "__module__", None), getattr(sub, "__qualname__", None)
            concrete = f"{mod}.{qual}.{live.attr}" if isinstance(mod, str) and isinstance(qual, str) else \
                f"{getattr(sub, '__name__', '?')}.{live.attr}"
            try:
                hooks = self._hooks(sub, live.attr, fn, concrete)
            except Exception:  # a class with an odd __module__
                hooks = None
            try:
                self._probe(sub, live.attr, fn, raw_attr(sub, live.attr), hooks, concrete)
            except Unresolved:
                continue
            live.overrides.append(concrete)
            new.append(concrete)
        return new

    def _patch(self, owner: Any, attr: str, concrete: str, batch: list[_Patch]) -> None:
        raw = raw_attr(owner, attr)
        own = own_attr(owner, attr)
        if own is not MISSING and is_wrapper(_unwrap_descriptor(own)):
            return  # wrapped already, under this or another name
        if isinstance(raw, property):
            raise Unresolved(f"{concrete} is a property; trace its getter's function instead")
        fn = function_of(raw)
        hooks = self._hooks(owner, attr, fn, concrete)
        if fn is not None and not isinstance(hooks, syncs.SyncSite):
            self._probe(owner, attr, fn, raw, hooks, concrete)
            return
        if not callable(raw):
            raise Unresolved(f"{concrete} is a {type(raw).__name__}, not a function")
        if isinstance(raw, type):
            raise Unresolved(f"{concrete} is a class; trace its methods ({concrete}.__init__, {concrete}.forward ...)")
        self._wrap(owner, attr, raw, own, hooks, concrete, batch)

    def _hooks(self, owner, attr: str, fn, concrete: str):
        """The hooks of a traced ``owner.attr`` (``fn``: its Python function, or None): a step rule
        (``steps.hooks.hooks_for``), a sync site or a collective; a ``--step`` name's marker; a label around them."""
        hooks = steps.hooks_for(owner, attr, fn) or syncs.hooks_for(owner, attr) or collectives.hooks_for(owner, attr)
        return self._user_hooks(hooks, self._names_of(fn, concrete))

    @staticmethod
    def _names_of(fn, concrete: str) -> tuple[str, ...]:
        """The names a user may give ``fn``: as reached, and by its defining module and qualname."""
        mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
        own = f"{mod}.{qual}" if isinstance(mod, str) and isinstance(qual, str) else None
        return (concrete, own) if own and own != concrete else (concrete,)

    def _user_hooks(self, hooks, names: tuple[str, ...]):
        """``hooks`` with the user's rules for ``names``: a ``--step`` name is a step marker (when no rule applies),
        a labelled name's span is named by its template."""
        def hit(pattern: str) -> bool:
            return any(n == pattern or fnmatch.fnmatchcase(n, pattern) for n in names)

        if hooks is None and any(hit(p) for p in self.step_names):
            hooks = steps.StepMarker()
        for pattern, template in self.labels.items():
            if hit(pattern):
                return labels.Label(template, hooks, f"label {pattern}", op=self._op(pattern))
        for pattern, fn in self.facts.items():
            if hit(pattern):
                return labels.Label(None, hooks, facts=fn, op=self._op(pattern))
        return hooks

    def _op(self, pattern: str) -> str | None:
        return self.ops.get(pattern)

    def use_preset(self, preset) -> None:
        """Take an app preset's labels, facts and ops (``apps.Preset``; its names are traced with ``add``); the user's
        own labels win."""
        with self._lock:
            for k, v in preset.labels.items():
                self.labels.setdefault(k, v)
            self.facts.update(preset.facts)
            self.ops.update(preset.ops)

    def _probe(self, owner, attr, fn, raw, hooks, concrete: str) -> None:
        """Put a probe on ``fn`` (the Python function behind ``owner.attr``)."""
        name = canonical(owner, attr, fn, concrete)
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
            with contextlib.suppress(CannotInstrument):  # (its earlier probes stay)
                self.mechanism.retrace(fn, existing)
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
            raise Unresolved(str(e)) from None
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
            raise Unresolved(f"{concrete} cannot be patched ({e})") from None
        p = _Patch(owner, attr, own, new)
        self._patches.append(p)
        if isinstance(owner, types.ModuleType) and own is not MISSING:
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
                            hooks = self._user_hooks(None, (f"__main__.{qual}",))
                            hooks = mirror.Mirror(f"__main__.{qual}", hooks) if self.mirror else hooks
                            defs[qual] = self._new_probe(f"__main__.{qual}", hooks=hooks, generator=generator)
                            self._where[f"__main__.{qual}"] = [filename, node.lineno]
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

    def on_import(self, module_name: str) -> None:
        """``module_name`` was just imported (called by ``importhook.NotifyingLoader``): its callbacks run, then
        the names awaiting it, the globs over its package and the overridden methods are resolved again."""
        with self._lock:
            for fn in self._callbacks.pop(module_name, ()):
                with contextlib.suppress(Exception):  # an integration must never break the program's import
                    fn(sys.modules[module_name])
            top = module_name.partition(".")[0]
            # a name in this package may be a re-export that this import made reachable (lazy modules)
            names = [n for n, m in self._pending.items() if n == module_name or n.startswith(module_name + ".")
                     or (n.partition(".")[0] == top and lazy_parent(m))]
            batch: list[_Patch] = []
            for n in names:
                self._try(n, batch)
            for n, live in list(self._live.items()):  # globs over packages, overridden methods
                try:
                    if isinstance(live, LiveGlob):
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
        """Whether an import of ``module_name`` may matter to this patcher (``importhook.ImportHook`` asks)."""
        with self._lock:
            if module_name in self._callbacks:
                return True
            top = module_name.partition(".")[0]
            if any(n.startswith(module_name + ".") or n.partition(".")[0] == top for n in self._pending):
                return True
            for live in self._live.values():
                if module_name.startswith(live.prefix + ".") if isinstance(live, LiveGlob) else top in live.packages:
                    return True
            return False



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

