"""The import hook of ``tracing.patch``: runs the patcher after a watched module executes, never imports
anything itself."""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .patch import Patcher


class ImportHook(importlib.abc.MetaPathFinder):
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
        spec.loader = NotifyingLoader(loader, self._patcher)
        return spec


class NotifyingLoader(importlib.abc.Loader):
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
        self._patcher.on_import(module.__name__)

    def __getattr__(self, name):
        return getattr(self._loader, name)
