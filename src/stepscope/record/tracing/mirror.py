"""Mirror spans into the device profiler's timeline while a device trace is recorded.

With ``stepscope run --device-trace`` every traced call also opens a range of the same name in the
profiler that records:

- torch.profiler (Kineto): a ``record_function`` range (a ``user_annotation`` in the trace), and an NVTX
  range on CUDA (for Nsight Systems);
- the XLA profiler (PyTorch/XLA programs): what ``torch_xla.debug.profiler.Trace`` (``xp.Trace``) opens,
  a ``TraceMe`` host range and an IR scope (``scope_pusher``: the lazy tensors' ops are named under it).

Ranges are kept on a per-thread stack: calls nest per thread, so enter/exit pair up; a generator or
coroutine that interleaves with others on one thread can pair a range with a neighbour's end.

PyTorch/XLA refuses a step marker (``torch_xla.sync()``, ``xm.mark_step()``) while an IR scope is open
on the thread: ``ResetScopeContext`` raises ``RuntimeError: Expecting scope to be empty but it is ...``
(torch/csrc/lazy/core/ir_metadata.cpp), which is why ``xp.Trace`` must never enclose one. A label must
never make the program fail, so while XLA mirroring is on, ``torch_xla._XLAC._xla_step_marker`` (the C
function every Python step marker calls; only C functions are wrapped) first closes the IR scopes that
stepscope opened on the calling thread, and the spans that were open around it are *not mirrored* from
then on: ``unmirrored()`` names them with the Python line of the step marker. Their ``TraceMe`` ranges of
that first call stay (a host range has no such rule).
"""

from __future__ import annotations

import os
import sys
import threading

from .wrappers import call_around

_enabled = False
_enter = _exit = _push = _pop = None
_xla = None  # the torch_xla._XLAC.profiler module while XLA mirroring is on
_local = threading.local()
_unmirrored: dict[str, str] = {}  # span name -> why (the step marker's Python line)
_marker_orig = None  # the real _xla_step_marker while ours stands in
_marker_listeners: list = []  # called with no argument after every step marker (metrics snapshots)


def enable() -> None:
    """Start mirroring into torch.profiler (imports torch; call when a Kineto capture starts)."""
    global _enabled, _enter, _exit, _push, _pop
    import torch

    _enter = torch.ops.profiler._record_function_enter_new
    _exit = torch.ops.profiler._record_function_exit
    if torch.cuda.is_available():
        _push, _pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    _enabled = True


def disable() -> None:
    """Stop mirroring into torch.profiler (ranges already open are closed by their spans)."""
    global _enabled
    _enabled = False


def enable_xla(on_program_session=None) -> None:
    """Start mirroring as ``xp.Trace`` ranges (call when an XLA capture starts; torch_xla is imported by
    then) and guard the step marker (see the module doc). ``on_program_session``: called (no argument)
    before the program opens a profiler session of its own (``xp.start_trace`` creates a
    ``TslProfilerSessionWrapper``, a C class): the process can hold one session, so stepscope's must end
    first, or the program's would fail ("Another profiling session active")."""
    global _xla, _marker_orig, _session_orig, _on_program_session
    import torch_xla

    C = torch_xla._XLAC
    _xla = C.profiler
    if _marker_orig is None:
        _marker_orig = C._xla_step_marker
        C._xla_step_marker = _guarded_step_marker(_marker_orig)
    _on_program_session = on_program_session
    if _session_orig is None and on_program_session is not None:
        _session_orig = C.profiler.TslProfilerSessionWrapper
        C.profiler.TslProfilerSessionWrapper = _yielding_session(_session_orig)


def pause_xla() -> None:
    """Stop opening XLA ranges (the step-marker guard stays, for ranges still open)."""
    global _xla
    _xla = None


def disable_xla() -> None:
    """Stop XLA mirroring and put the real step marker and session class back (unless replaced since)."""
    global _xla, _marker_orig, _session_orig, _on_program_session
    _xla = None
    _on_program_session = None
    C = sys.modules.get("torch_xla._XLAC") or getattr(sys.modules.get("torch_xla"), "_XLAC", None)
    if _marker_orig is not None:
        if C is not None and getattr(C._xla_step_marker, "__stepscope_guard__", False):
            C._xla_step_marker = _marker_orig
        _marker_orig = None
    if _session_orig is not None:
        if C is not None and getattr(C.profiler.TslProfilerSessionWrapper, "__stepscope_guard__", False):
            C.profiler.TslProfilerSessionWrapper = _session_orig
        _session_orig = None


_session_orig = None
_on_program_session = None


def _program_session() -> None:
    fn = _on_program_session
    if fn is not None:
        fn()


def _yielding_session(real):
    return call_around(real, _program_session)


def add_marker_listener(fn) -> None:
    """Call ``fn()`` after every XLA step marker while XLA mirroring is on (never raises into the program)."""
    _marker_listeners.append(fn)


def remove_marker_listener(fn) -> None:
    try:
        _marker_listeners.remove(fn)
    except ValueError:
        pass


def unmirrored() -> dict[str, str]:
    """Span names left unmirrored because they enclose an XLA step marker -> the reason (one line)."""
    return dict(_unmirrored)


def reset_unmirrored() -> None:
    _unmirrored.clear()


_SKIP = (os.sep + "torch_xla" + os.sep, os.sep + "torch" + os.sep, os.path.dirname(os.path.abspath(__file__)))
_SKIP_FILES = ("typing_extensions.py", "functools.py", "contextlib.py", "warnings.py")  # deprecation wrappers


def _caller_line() -> str:
    """``file.py:line`` of the first caller outside torch, torch_xla, stepscope and decorator modules."""
    f = sys._getframe(2)
    while f is not None and (any(s in f.f_code.co_filename for s in _SKIP)
                             or os.path.basename(f.f_code.co_filename) in _SKIP_FILES):
        f = f.f_back
    if f is None:
        return "?"
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


def _close_scopes() -> None:
    """Before a step marker: close the IR scopes stepscope opened on this thread; note their spans."""
    stack = getattr(_local, "stack", None)
    if not stack:
        return
    where = None
    for entry in reversed(stack):  # innermost first: scopes pop in the order they were pushed
        if entry is None or entry[2] is None:
            continue
        name = entry[0]
        entry[2] = None  # drops the ScopePusher: its destructor pops the IR scope
        if name not in _unmirrored:
            if where is None:
                try:
                    where = _caller_line()
                except Exception:
                    where = "?"
            _unmirrored[name] = (f"not mirrored as an xp.Trace range: it encloses an XLA step marker "
                                 f"(torch_xla.sync/mark_step at {where})")


def _after_marker() -> None:
    for fn in tuple(_marker_listeners):
        try:
            fn()
        except Exception:
            pass


def _guarded_step_marker(real):
    return call_around(real, _close_scopes, _after_marker)


class Mirror:
    """Span hooks that open/close the mirror ranges, chained with the name's own hooks (if any)."""

    __slots__ = ("name", "inner", "op")

    def __init__(self, name: str, inner=None) -> None:
        self.name = name
        self.inner = inner
        self.op = getattr(inner, "op", "function")

    def enter(self, args: tuple, kwargs: dict):
        attrs = self.inner.enter(args, kwargs) if self.inner is not None else None
        self._open()
        return attrs

    def enter_frame(self, frame):
        attrs = self.inner.enter_frame(frame) if self.inner is not None else None
        self._open()
        return attrs

    def _open(self) -> None:
        stack = getattr(_local, "stack", None)
        if _enabled or _xla is not None or stack is not None:  # once a thread has a stack, every call pairs
            if stack is None:
                stack = _local.stack = []
            handle = None
            try:
                if _enabled:
                    handle = ["rf", _enter(self.name, None), None]
                    if _push is not None:
                        _push(self.name)
                if _xla is not None and self.name not in _unmirrored:
                    tm = _xla.TraceMe(self.name)
                    tm.__enter__()
                    rf = handle[1] if handle is not None else None
                    handle = [self.name, tm, _xla.scope_pusher(self.name)]
                    if rf is not None:
                        handle.append(rf)
            except Exception:
                pass
            stack.append(handle)

    def exit(self) -> None:
        stack = getattr(_local, "stack", None)
        if stack:
            handle = stack.pop()
            if handle is not None:
                try:
                    if handle[0] == "rf":
                        _exit(handle[1])
                        if _pop is not None:
                            _pop()
                    else:
                        handle[2] = None  # pops the IR scope (if the step-marker guard has not already)
                        handle[1].__exit__(None, None, None)
                        if len(handle) > 3:
                            _exit(handle[3])
                            if _pop is not None:
                                _pop()
                except Exception:
                    pass
        if self.inner is not None:
            self.inner.exit()
