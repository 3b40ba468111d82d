"""Mirror spans into the torch profiler's timeline while a device trace is recorded.

With ``stepscope run --device-trace`` every traced call also opens a ``record_function`` range of the
same name (a ``user_annotation`` in the Kineto trace), and an NVTX range on CUDA (for Nsight Systems),
so that the stored trace shows the spans over the ops and kernels they launched, in any viewer.
Ranges are kept on a per-thread stack: calls nest per thread, so enter/exit pair up; a generator or
coroutine that interleaves with others on one thread can pair a range with a neighbour's end.
"""

from __future__ import annotations

import threading

_enabled = False
_enter = _exit = _push = _pop = None
_local = threading.local()


def enable() -> None:
    """Start mirroring (imports torch; call when a device capture starts)."""
    global _enabled, _enter, _exit, _push, _pop
    import torch

    _enter = torch.ops.profiler._record_function_enter_new
    _exit = torch.ops.profiler._record_function_exit
    if torch.cuda.is_available():
        _push, _pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    _enabled = True


def disable() -> None:
    global _enabled
    _enabled = False


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
        if _enabled:
            stack = getattr(_local, "stack", None)
            if stack is None:
                stack = _local.stack = []
            try:
                stack.append(_enter(self.name, None))
                if _push is not None:
                    _push(self.name)
            except Exception:
                stack.append(None)

    def exit(self) -> None:
        if _enabled:
            stack = getattr(_local, "stack", None)
            if stack:
                handle = stack.pop()
                if handle is not None:
                    try:
                        _exit(handle)
                        if _pop is not None:
                            _pop()
                    except Exception:
                        pass
        if self.inner is not None:
            self.inner.exit()
