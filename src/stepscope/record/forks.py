"""The session across ``os.fork``: the recorder thread parked (joined) before a fork and started again in the
parent, the forked child left as the child of an unprofiled program (``Session.before_fork``,
``after_fork_in_parent``, ``after_fork_in_child``). ``ForkWatch`` holds the ``os.register_at_fork`` hooks, registered
once per process; ``call_soon_in_main`` runs a function in the main thread once ``os.fork`` has returned (3.13+ counts
the threads for its fork warning after the parent's hooks)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Protocol


class ForkAware(Protocol):
    """What ``ForkWatch`` calls around ``os.fork`` (``session.Session`` is one; this module does not import it)."""

    #: called in the child after ``after_fork_in_child`` (None: the child is not recorded)
    on_forked_child: object

    def before_fork(self, frame=None) -> None: ...

    def after_fork_in_parent(self) -> None: ...

    def after_fork_in_child(self) -> None: ...


def os_thread_count() -> int:
    """The process's OS threads now (``/proc/self/task``; else the threads Python knows of)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


_pending_calls: list = []  # the ctypes callbacks waiting for the main thread (kept alive until they ran)


def call_soon_in_main(fn, frame=None) -> bool:
    """Run ``fn()`` in the main thread at the interpreter's next pending-call check (``Py_AddPendingCall``,
    through ctypes); with ``frame``, once the main thread runs that frame again (a check inside other code,
    such as another at-fork hook, puts the call back). False when it cannot be scheduled."""
    try:
        import ctypes

        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
        left = [10_000]

        def run(_arg) -> int:
            try:
                if frame is not None and left[0] > 0 and sys._getframe(1) is not frame:
                    left[0] -= 1
                    if ctypes.pythonapi.Py_AddPendingCall(cb, None) == 0:
                        return 0
                _pending_calls.remove(cb)
                fn()
            except Exception:
                pass
            return 0

        cb = proto(run)
        _pending_calls.append(cb)
        if ctypes.pythonapi.Py_AddPendingCall(cb, None) != 0:
            _pending_calls.remove(cb)
            return False
        return True
    except Exception:
        return False


class ForkWatch:
    """The ``os.register_at_fork`` hooks, registered once per process, acting on the session recording now."""

    def __init__(self) -> None:
        self.session: ForkAware | None = None
        self._registered = False

    def watch(self, session: ForkAware) -> None:
        self.session = session
        if not self._registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self._before, after_in_parent=self._parent, after_in_child=self._child)
            self._registered = True

    def _before(self) -> None:
        s = self.session
        if s is not None:
            try:
                s.before_fork(sys._getframe(1))
            except Exception:  # never into the program's fork
                pass

    def _parent(self) -> None:
        s = self.session
        if s is not None:
            try:
                s.after_fork_in_parent()
            except Exception:
                pass

    def _child(self) -> None:
        s, self.session = self.session, None
        if s is not None:
            try:
                s.after_fork_in_child()
            except Exception:
                return
            hook = s.on_forked_child
            if hook is not None:  # the child is recorded in turn (``processes.follow_fork``)
                hook(s)


forks = ForkWatch()
