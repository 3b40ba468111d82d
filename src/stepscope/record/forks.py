"""The session across ``os.fork``: the recorder thread parked (joined) before a fork and started again in the
parent, the forked child left as the child of an unprofiled program (``Session.before_fork``,
``after_fork_in_parent``, ``after_fork_in_child``). ``ForkWatch`` holds the ``os.register_at_fork`` hooks, registered
once per process; ``call_soon_in_main`` runs a function in the main thread once ``os.fork`` has returned (3.13+ counts
the threads for its fork warning after the parent's hooks)."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Protocol

from .spans import buffer
from .steps import cpuwait
from .tracing import probes


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


class SessionForks:
    """``session.Session``'s part across ``os.fork`` (a mixin: it reads and sets the session's recorder thread, locks
    and generation): the recorder parked before a fork, started again in the parent, the child left unrecorded."""

    def before_fork(self, frame=None) -> None:
        """``os.fork()`` is about to run in this process: park the recorder thread (it ends, joined), so that a
        program with one thread forks with one thread (Python 3.12+ warns when a multi-threaded process
        forks) and no lock of stepscope's is held by a thread the child will not have. Whatever it had not
        written stays in the buffers for the next recorder (``after_fork_in_parent``)."""
        th = self._thread
        self._fork_frame = None
        if self.finished or th is None or th is threading.current_thread() or os.getpid() != self._pid:
            return
        self._fork_frame = frame  # the frame that called os.fork (it goes on once the fork is done)
        self._gen += 1  # the running recorder ends at its next look
        self._stop.set()
        try:
            self._wake.release()  # (a recorder paused while the program profiles itself waits on it)
        except RuntimeError:
            pass
        self._wake_resting()
        th.join(timeout=10)  # one loop turn; a flush of 131,072 spans takes well under a second
        gone_by = time.monotonic() + 0.5  # join returns as the thread's state is freed: its OS thread may still be
        while th.native_id and os.path.exists(f"/proc/self/task/{th.native_id}") and time.monotonic() < gone_by:
            time.sleep(0.0002)  # ending, and 3.12 counts /proc's threads for its fork warning
        self._alone_at_fork = sys.version_info >= (3, 13) and os_thread_count() == 1

    def after_fork_in_parent(self) -> None:
        """The fork is done (this is the parent): start the recorder again. Python 3.13+ counts the threads for
        its fork warning after these hooks: where the program forked with one thread, the recorder starts when
        the interpreter next runs pending calls in the main thread (right after ``os.fork`` returns: the
        forking thread is the main thread, the only one)."""
        if self.finished or os.getpid() != self._pid:
            return
        if getattr(self, "_alone_at_fork", False) and call_soon_in_main(self._restart_recorder, self._fork_frame):
            self._fork_frame = None
            return
        self._fork_frame = None
        self._restart_recorder()

    def _restart_recorder(self) -> None:
        if self.finished or os.getpid() != self._pid or (self._thread is not None and self._thread.is_alive()
                                                          and self._gen == getattr(self._thread, "_stepscope_gen", -1)):
            return
        self._wake.acquire()
        if self.finished:  # finished meanwhile (another thread): its release is kept
            self._wake.release()
            return
        self._stop.clear()
        self._start_recorder()

    def after_fork_in_child(self) -> None:
        """This is a forked child: the run is the parent's. Leave the child as the child of an unprofiled program:
        tracing undone (what it calls is not recorded), the sampling signals back to their default action, no
        timer, no memory reading, nothing written (``finish`` and ``flush_on_signal`` do nothing here), and
        fresh locks (one held at the fork by a thread that the child does not have would block forever)."""
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Lock()
        self.finished = True
        self.main_sampler.forked()
        probes.release_span_memory(self._span_memory)
        cpuwait.use(None)  # (the parent's threads' files)
        self._root_token = None
        try:
            self.patcher.forked()
        except Exception:
            pass
        buffer.clear()

