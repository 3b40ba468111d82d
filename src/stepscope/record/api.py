"""The public recording API, in the Sentry SDK's shape: ``init``, ``transaction``, ``span``, ``trace``.

Stdlib only. ``init`` starts a session for this process; spans opened with ``transaction``/``span`` or
by traced functions are recorded while one is active (spans made with no session are dropped, bounded).
"""

from __future__ import annotations

import atexit
import sys
import threading
from threading import get_ident
from typing import Any, Callable, Iterable

from ..core import clock
from .session import Session
from .settings import DEFAULT_HZ, Settings
from .spans import buffer
from .spans.record import REC_PARENT
from .tracing.resolve import normalize_targets
from .tracing.wrappers import wrap

_session: Session | None = None
_lock = threading.Lock()


def init(functions_to_trace: Iterable[Any] | None = None, profiles_hz: float = DEFAULT_HZ, *, store: str | None = None,
         transaction: str | None = None, max_stack_depth: int = 256, flush_interval_s: float = 1.0,
         run_id: str | None = None, command: list[str] | None = None, _owns_run: bool = True) -> Session:
    """Start recording this process: trace ``functions_to_trace`` and sample stacks at ``profiles_hz``.

    ``functions_to_trace``: qualified names (``"pkg.mod.Class.method"``, globs allowed) or Sentry's form
    ``[{"qualified_name": ...}]``. ``profiles_hz``: samples/s per thread, 0 for none, else 1 to 10000.
    ``store``: store folder (default ``$STEPSCOPE_STORE`` or ``./.stepscope``). ``transaction``: name of a
    root transaction spanning until ``shutdown()`` or exit. ``max_stack_depth``: frames per sample (1 to
    10000); ``flush_interval_s``: seconds between writes (0.01 to 3600). The run is written as it goes and
    finished at exit.

    Raises ValueError for a malformed name or an out-of-range setting (one line naming it and its range,
    e.g. ``profiles_hz: must be 0 (off) or between 0.01 and 10000, got 1e-12``), StoreError for a store
    that cannot be opened, RuntimeError if a session is already active.
    """
    settings = Settings(functions_to_trace=tuple(normalize_targets(functions_to_trace)), profiles_hz=profiles_hz,
                        max_stack_depth=max_stack_depth, flush_interval_s=flush_interval_s,
                        transaction=transaction, store=store)
    return start(settings, run_id=run_id, command=command, _owns_run=_owns_run)


def start(settings: Settings, *, run_id: str | None = None, command: list[str] | None = None,
          _owns_run: bool = True, _origin: str = "api") -> Session:
    """Start recording with a full ``Settings`` (what ``init`` does after building them), with every part those
    settings ask for (``parts``: the device trace, the compile report, the memory history...), as `stepscope run`
    records them. ``_origin``: "api", or "run" for stepscope's launcher (``parts.ORIGINS``).

    Raises RuntimeError if a session is already active, StoreError for a store that cannot be opened.
    """
    global _session
    with _lock:
        if _session is not None and not _session.finished:
            raise RuntimeError(f"stepscope is already recording run {_session.run_id}; call stepscope.shutdown() first")
        _session = Session(settings, run_id=run_id, command=command, owns_run=_owns_run, origin=_origin)
        if _owns_run:
            atexit.register(_report_unresolved, _session)
        return _session.start()


def adopt(session: Session) -> None:
    """Make ``session`` (started by stepscope itself, e.g. in a forked child: ``processes.follow_fork``) the active one."""
    global _session
    _session = session


def _report_unresolved(session: Session) -> None:
    from .tracing.patch import is_note

    for name, why in (session.unresolved or session.patcher.unresolved).items():
        if is_note(why):  # traced: a remark about it (its overrides, a compiled region)
            print(f"stepscope: {name}: {why}", file=sys.stderr)
        else:
            print(f"stepscope: could not trace {name}: {why}", file=sys.stderr)


def current_session() -> Session | None:
    """The active session, or None."""
    s = _session
    return s if s is not None and not s.finished else None


def shutdown() -> None:
    """Finish the active session (write everything, undo patches). No-op without one."""
    global _session
    with _lock:
        if _session is not None:
            _session.finish()
            _session = None


class span:
    """A span around a block: ``with stepscope.span("vae decode", op="function", **attributes): ...``.

    Nests under the current span of this thread/asyncio task. An exception leaving the block marks the
    span as error with the exception's type and propagates unchanged. Also usable as a decorator.
    """

    __slots__ = ("name", "op", "attrs", "_sid", "_parent", "_token", "_start")

    def __init__(self, name: str, op: str = "function", **attributes: Any) -> None:
        self.name, self.op, self.attrs = name, op, attributes or None

    def __enter__(self) -> "span":
        self._sid = buffer.next_span_id()
        self._start = clock.now_ns()
        rec = buffer.open_record(self._sid, self.name, self._start)
        self._parent = rec[REC_PARENT]
        self._token = buffer.current_span.set(rec)
        return self

    def __exit__(self, et, ev, tb) -> None:
        err = None
        if et is not None:
            err = et.__qualname__ if et.__module__ == "builtins" else f"{et.__module__}.{et.__qualname__}"
        buffer.finished.append((self._sid, self._parent, self.name, self.op, self._start, clock.now_ns(), get_ident(),
                                err, self.attrs))
        buffer.current_span.reset(self._token)

    def set_attribute(self, key: str, value: Any) -> None:
        """Attach an attribute (JSON-serialisable) to the span."""
        if self.attrs is None:
            self.attrs = {}
        self.attrs[key] = value

    def __call__(self, fn: Callable) -> Callable:
        return wrap(fn, self.name, self.op)


def transaction(name: str, op: str = "transaction", **attributes: Any) -> span:
    """A root span: ``with stepscope.transaction("txt2img", op="function"): ...``; spans inside nest under it."""
    return span(name, op, **attributes)


def trace(fn: Callable | None = None, *, name: str | None = None) -> Callable:
    """Decorator: one span per call, named ``module.qualname`` (or ``name``). Works on functions, methods,
    coroutines, generators and async generators; keeps signature, name and docstring (``__wrapped__``)."""

    def deco(f: Callable) -> Callable:
        return wrap(f, name or f"{f.__module__}.{f.__qualname__}")

    return deco(fn) if fn is not None else deco
