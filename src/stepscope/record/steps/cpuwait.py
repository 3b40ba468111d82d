"""A thread's wait for a CPU: how long it was ready to run but another thread or process held every CPU.

Read from ``/proc/thread-self/schedstat`` (Linux, ``CONFIG_SCHED_INFO``; the kernel's
Documentation/scheduler/sched-stats.rst): three numbers, the time spent on the CPU, the time spent waiting on a run
queue (``sched_info.run_delay``) and the number of time slices, ns. The second is what this reads: a counter that only
grows while the thread is runnable and not running. Blocking (a sleep, I/O, a lock, a CUDA sync) does not count:
that is the program's own waiting; this is the machine's. One ``os.pread`` of a file descriptor opened once per
thread (each thread's own file: ``thread-self`` resolves to the opening thread), about 2 us.

The probes of step-level spans read it at the span's entry and exit (``memory.history.SpanMemory``: the
``cpu.wait_in`` and ``cpu.wait_ns`` attributes), and so do a sampler loop's iterations (``steps.hooks``: k-diffusion's
and ComfyUI's steps), through ``current``, so that a step slowed by another process taking the CPU is told apart from
a step the program made slow (``analysis.cpuwait``, ``analysis.slow``).
"""

from __future__ import annotations

import os
import sys
import threading

from ...core.steprules import WAIT_IN, WAIT_NS

_pread = getattr(os, "pread", None)
_native_id = getattr(threading, "get_native_id", None)
_thread_id = None  # (``_native.thread_id``, or ``threading.get_native_id`` without the extension: at the first ask)


def _tid() -> int:
    """The calling thread's OS id: ``_native.thread_id`` (a ``gettid`` system call once per thread, and again in a
    forked child, reset by a C fork handler: no Python code runs at the fork, where a SIGTERM sent at once would be
    handled before stepscope's own fork hook made the child's session), else ``threading.get_native_id()``."""
    global _thread_id
    if _thread_id is None:
        from .. import native

        _thread_id = getattr(native.ext, "thread_id", None) or _native_id
    return _thread_id()


_run_delay = None  # (``_native.run_delay``, False without the extension: looked up at the first read)

#: the recording session's reader (``use``: while it records with the memory lane on), or None
current: "RunDelay | None" = None


def use(reader: "RunDelay | None") -> None:
    """Make ``reader`` the one a sampler loop's iterations read (None: none, a forked child's)."""
    global current
    current = reader


def release(reader: "RunDelay") -> None:
    """Stop reading ``reader`` if it is the one in use (a session that finishes drops its own only)."""
    global current
    if current is reader:
        current = None


class RunDelay:
    """The calling thread's run-queue wait so far (ns): ``read()``, -1 where it cannot be read (not Linux, no
    schedstat). File descriptors are kept per OS thread id and closed by ``close()``."""

    __slots__ = ("_fds", "ok")

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}
        self.ok = _pread is not None and _native_id is not None and sys.platform.startswith("linux")

    def fd(self) -> int:
        """The calling thread's schedstat file descriptor (opened at its first use), or -1 where it cannot be read:
        for one C call that reads it with other figures (``memory.history.SpanMemory``); ``read`` is the fallback
        where that read fails (a descriptor of an ended thread whose id came back)."""
        if not self.ok:
            return -1
        tid = _tid()
        fd = self._fds.get(tid)
        if fd is None:
            try:
                fd = self._fds[tid] = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self.ok = False  # (no schedstat on this kernel: never tried again)
                return -1
        return fd

    def read(self) -> int:
        """The calling thread's wait so far (ns), -1 where unread. With the C extension (``_native.run_delay``) the
        file is read again only when the thread left its CPU since its last read (``getrusage``'s context switches: the
        wait grows only then), a system call of ~6 us for the file's ~20 right after a step's torch work."""
        global _run_delay
        if _run_delay is None:
            from .. import native

            _run_delay = getattr(native.ext, "run_delay", False)
        for attempt in (0, 1):
            fd = self.fd()
            if fd < 0:
                return -1
            if _run_delay:
                w = _run_delay(fd)
                if w >= 0:
                    return w
            try:
                b = _pread(fd, 80, 0)
                i = b.index(b" ")
                return int(b[i + 1:b.index(b" ", i + 1)])
            except (OSError, ValueError):  # a descriptor of an ended thread whose id came back: open it anew
                self._fds.pop(_tid(), None)
                try:
                    os.close(fd)
                except OSError:
                    pass
        return -1

    def enter(self, attrs: dict) -> None:
        """The counter now into ``attrs`` (``WAIT_IN``), at a span's entry."""
        w = self.read()
        if w >= 0:
            attrs[WAIT_IN] = w

    def exit(self, attrs: dict) -> None:
        """The wait since ``enter`` into ``attrs`` (``WAIT_NS``), at the span's end; nothing when it has no entry
        reading, or the counter went back (another thread's: a generator resumed elsewhere)."""
        w0 = attrs.get(WAIT_IN)
        if w0 is not None:
            w = self.read()
            if w >= w0:
                attrs[WAIT_NS] = w - w0

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
