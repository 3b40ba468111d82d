"""The import hook of ``tracing.patch``: runs the patcher after a watched module executes, never imports
anything itself.

No frame of stepscope's is on the stack while a watched module's code runs, so that what the module sees
is what it sees without stepscope: a traceback of an error raised as it imports (ComfyUI logs those of its
custom nodes), a ``warnings.warn(..., stacklevel=2)`` at its top level (it names the importer: a frame of
ours would take the warning, and the default filters would hide a DeprecationWarning meant for
``__main__``), ``inspect.stack()``. CPython trims the importlib frames of such a traceback (import.c's
``remove_importlib_frames``: a run of ``<frozen importlib._bootstrap*>`` frames that ends in
``_call_with_frames_removed``, or every one for an ImportError): a frame of ours in the run would keep
``_find_and_load``, ``_find_and_load_unlocked`` and ``_load_unlocked`` in it, one set per nested import.

How: the watched module's spec keeps a wrapper loader (``NotifyingLoader``) for the paths that execute a
module outside the import statement (``importlib.reload``, ``module_from_spec`` + ``exec_module`` by hand:
the wrapper executes and notifies, its own frame cut from a traceback), and its class becomes a subclass
(``_WatchedSpec``) whose ``_initializing`` the import system sets around the execution
(``_bootstrap._load_unlocked``: True just before ``spec.loader.exec_module(module)``, False after, in a
``finally``): at True the real loader goes back on the spec, so the import system calls it directly; at
False the spec is a plain ``ModuleSpec`` again and, when the module is in ``sys.modules`` (a failed one was
removed), the patcher is told. Only ``create_module`` (an extension module's initialisation) runs under a
frame of ours on that path, cut from a traceback likewise. A Python that stopped setting ``_initializing``
would take the wrapper's path."""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Protocol


class Watcher(Protocol):
    """What the hook asks and tells (``patch.Patcher`` is one; this module does not import it)."""

    def watches(self, module_name: str) -> bool: ...

    def on_import(self, module_name: str) -> None: ...

_ModuleType = type(sys)


class ImportHook(importlib.abc.MetaPathFinder):
    """Runs the patcher after a watched module executes; never imports anything itself."""

    def __init__(self, patcher: Watcher) -> None:
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
        except BaseException as e:  # a finder's own error, as it would be raised without this hook
            _drop_own_frame(e)
            raise
        finally:
            self._local.busy = False
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = NotifyingLoader(loader, self._patcher)
        if target is None:  # an import (a reload executes through the wrapper: it leaves _initializing alone)
            _watch(spec)
        return spec


class NotifyingLoader(importlib.abc.Loader):
    """Executes the module with its own loader (restored on the module), then notifies the patcher."""

    def __init__(self, loader, patcher: Watcher) -> None:
        self._loader = loader
        self._patcher = patcher

    def create_module(self, spec):
        try:
            module = self._loader.create_module(spec)
            if module is None:  # the import system's default (``_bootstrap._new_module``), made here so that
                module = _ModuleType(spec.name)  # the module's __loader__ is the real loader from the start
            if getattr(module, "__loader__", None) is None:
                try:
                    module.__loader__ = self._loader
                except AttributeError:
                    pass
            return module
        except BaseException as e:
            _drop_own_frame(e)
            raise

    def exec_module(self, module):
        _unwatch(module.__spec__)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        try:
            self._loader.exec_module(module)
        except BaseException as e:
            _drop_own_frame(e)
            raise
        self._patcher.on_import(module.__name__)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _drop_own_frame(exc: BaseException) -> None:
    """Cut the frame that caught ``exc`` (the caller's: a frame of this module) from its traceback; a bare
    ``raise`` then adds none, so the traceback is the one raised without this hook, and CPython trims the
    importlib frames around it as it does without it."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        exc.__traceback__ = tb.tb_next


class _WatchedSpecBase:
    """Mixed into a watched spec's class: the import system's ``_initializing`` around the execution."""

    @property
    def _initializing(self):
        return self.__dict__.get("_initializing", False)

    @_initializing.setter
    def _initializing(self, value):
        d = self.__dict__
        d["_initializing"] = value
        if value:  # the import statement executes the module next: with the real loader, no frame of ours
            wrapper = self.loader
            if isinstance(wrapper, NotifyingLoader):
                self.loader = wrapper._loader
                d["_stepscope_wrapper"] = wrapper
            return
        wrapper = d.pop("_stepscope_wrapper", None)
        _unwatch(self)
        if wrapper is not None and sys.modules.get(self.name) is not None:  # a failed one was removed
            wrapper._patcher.on_import(self.name)

    @_initializing.deleter
    def _initializing(self):
        del self.__dict__["_initializing"]


_WATCHED: dict[type, type] = {}


def _watch(spec) -> None:
    """Make ``spec``'s class the ``_WatchedSpec`` subclass of its own (left as it is where that fails)."""
    cls = type(spec)
    sub = _WATCHED.get(cls)
    if sub is None:
        try:
            sub = type(cls.__name__, (_WatchedSpecBase, cls), {"__module__": cls.__module__,
                                                               "__qualname__": cls.__qualname__})
        except TypeError:
            return
        _WATCHED[cls] = sub
    try:
        spec.__class__ = sub
    except TypeError:
        pass


def _unwatch(spec) -> None:
    """The spec's own class again."""
    cls = type(spec)
    if _WatchedSpecBase in cls.__bases__:
        spec.__dict__.pop("_stepscope_wrapper", None)
        spec.__class__ = cls.__bases__[1]
