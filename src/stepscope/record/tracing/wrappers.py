"""Wrappers that record one span per call of a function, whatever kind of function it is.

The span covers the real execution: a coroutine's span ends when it returns, a generator's when it is
exhausted or closed, an async generator's likewise. While a generator or async generator runs, its span
is the current span (so spans of calls it makes nest under it); between resumptions the caller's
context is left untouched, because a generator shares its caller's context.

The plain-function wrapper is the hot path (overhead target: 1 us per call, see
``benchmarks/tracer_overhead.py``): it reads the clock twice, sets and resets one ContextVar and appends
one tuple. Exceptions propagate unchanged; the span records the exception's type name.

Wrappers keep ``__name__``, ``__qualname__``, ``__module__``, ``__doc__``, ``__dict__`` and set
``__wrapped__`` (so ``inspect.signature`` sees the original), and carry ``__stepscope_span__`` (the
span name) so that they are recognised and never wrapped twice.
"""

from __future__ import annotations

import functools
import inspect
from threading import get_ident
from time import perf_counter_ns
from typing import Any, Callable, Protocol

from ..spans import buffer
from ..spans.record import REC_PARENT

_SET = buffer.current_span.set
_RESET = buffer.current_span.reset
_OPEN = buffer.open_record


class SpanHooks(Protocol):
    """Optional per-name hooks (e.g. the diffusers step counter).

    ``enter(args, kwargs)`` runs before the call (it sees the call's arguments, ``self`` first for a
    method, and must not change them) and returns the span's attributes (dict or None); ``exit()`` runs
    after it, also on error. Both must be cheap and must never raise.
    """

    def enter(self, args: tuple, kwargs: dict) -> dict | None: ...

    def exit(self) -> None: ...


def _error_name(exc: BaseException) -> str:
    t = type(exc)
    mod = t.__module__
    return t.__qualname__ if mod in ("builtins", None) else f"{mod}.{t.__qualname__}"


def is_wrapper(fn: Any) -> bool:
    """True if ``fn`` is a stepscope span wrapper."""
    return getattr(fn, "__stepscope_span__", None) is not None


def wrap(fn: Callable, name: str, op: str = "function", hooks: SpanHooks | None = None) -> Callable:
    """Return a wrapper of ``fn`` that records a span named ``name`` per call.

    Picks the wrapper kind from ``fn``: coroutine function, generator function, async generator
    function, or plain callable. Raises TypeError if ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"cannot trace {name}: {type(fn).__name__} object is not callable")
    if inspect.isasyncgenfunction(fn):
        w = _wrap_asyncgen(fn, name, op, hooks)
    elif inspect.iscoroutinefunction(fn):
        w = _wrap_coroutine(fn, name, op, hooks)
    elif inspect.isgeneratorfunction(fn):
        w = _wrap_generator(fn, name, op, hooks)
    elif hooks is not None:
        w = _wrap_hooked(fn, name, op, hooks)
    else:
        w = _wrap_plain(fn, name, op)
    try:
        functools.update_wrapper(w, fn)
    except (AttributeError, TypeError):  # builtins without __dict__ etc.
        w.__wrapped__ = fn
    w.__stepscope_span__ = name
    return w


def _wrap_plain(fn: Callable, name: str, op: str) -> Callable:
    append = buffer.finished.append
    next_id = buffer.next_span_id
    now = perf_counter_ns
    open_, set_, reset = _OPEN, _SET, _RESET

    def wrapper(*args, **kwargs):
        sid = next_id()
        rec = open_(sid, name)
        parent = rec[REC_PARENT]
        token = set_(rec)
        start = now()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            append((sid, parent, name, op, start, now(), get_ident(), _error_name(exc), None))
            reset(token)
            raise
        append((sid, parent, name, op, start, now(), get_ident(), None, None))
        reset(token)
        return result

    return wrapper


def _wrap_hooked(fn: Callable, name: str, op: str, hooks: SpanHooks) -> Callable:
    append = buffer.finished.append

    def wrapper(*args, **kwargs):
        sid = buffer.next_span_id()
        rec = _OPEN(sid, name)
        parent = rec[REC_PARENT]
        attrs = hooks.enter(args, kwargs)
        token = _SET(rec)
        start = perf_counter_ns()
        err = None
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            err = _error_name(exc)
            raise
        finally:
            append((sid, parent, name, op, start, perf_counter_ns(), get_ident(), err, attrs))
            _RESET(token)
            hooks.exit()

    return wrapper


def _wrap_coroutine(fn: Callable, name: str, op: str, hooks: SpanHooks | None) -> Callable:
    append = buffer.finished.append

    async def wrapper(*args, **kwargs):
        sid = buffer.next_span_id()
        rec = _OPEN(sid, name)
        parent = rec[REC_PARENT]
        attrs = hooks.enter(args, kwargs) if hooks else None
        token = _SET(rec)
        start = perf_counter_ns()
        err = None
        try:
            return await fn(*args, **kwargs)
        except BaseException as exc:
            err = _error_name(exc)
            raise
        finally:
            append((sid, parent, name, op, start, perf_counter_ns(), get_ident(), err, attrs))
            _RESET(token)
            if hooks:
                hooks.exit()

    return wrapper


def _wrap_generator(fn: Callable, name: str, op: str, hooks: SpanHooks | None) -> Callable:
    append = buffer.finished.append

    def wrapper(*args, **kwargs):
        gen = fn(*args, **kwargs)
        sid = buffer.next_span_id()
        rec = _OPEN(sid, name)
        parent = rec[REC_PARENT]
        attrs = hooks.enter(args, kwargs) if hooks else None
        start = perf_counter_ns()
        err = None
        send_value: Any = None
        throw_exc: BaseException | None = None
        try:
            while True:
                token = _SET(rec)
                try:
                    if throw_exc is None:
                        item = gen.send(send_value)
                    else:
                        exc, throw_exc = throw_exc, None
                        item = gen.throw(exc)
                except StopIteration as stop:
                    return stop.value
                finally:
                    _RESET(token)
                try:
                    send_value = yield item
                except GeneratorExit:
                    token = _SET(rec)
                    try:
                        gen.close()
                    finally:
                        _RESET(token)
                    raise
                except BaseException as exc:  # thrown in by the caller: pass it on
                    throw_exc = exc
                    send_value = None
        except GeneratorExit:
            raise
        except BaseException as exc:
            err = _error_name(exc)
            raise
        finally:
            append((sid, parent, name, op, start, perf_counter_ns(), get_ident(), err, attrs))
            if hooks:
                hooks.exit()

    return wrapper


def _wrap_asyncgen(fn: Callable, name: str, op: str, hooks: SpanHooks | None) -> Callable:
    append = buffer.finished.append

    async def wrapper(*args, **kwargs):
        agen = fn(*args, **kwargs)
        sid = buffer.next_span_id()
        rec = _OPEN(sid, name)
        parent = rec[REC_PARENT]
        attrs = hooks.enter(args, kwargs) if hooks else None
        start = perf_counter_ns()
        err = None
        send_value: Any = None
        throw_exc: BaseException | None = None
        try:
            while True:
                token = _SET(rec)
                try:
                    if throw_exc is None:
                        item = await agen.asend(send_value)
                    else:
                        exc, throw_exc = throw_exc, None
                        item = await agen.athrow(exc)
                except StopAsyncIteration:
                    return
                finally:
                    _RESET(token)
                try:
                    send_value = yield item
                except GeneratorExit:
                    token = _SET(rec)
                    try:
                        await agen.aclose()
                    finally:
                        _RESET(token)
                    raise
                except BaseException as exc:
                    throw_exc = exc
                    send_value = None
        except GeneratorExit:
            raise
        except BaseException as exc:
            err = _error_name(exc)
            raise
        finally:
            append((sid, parent, name, op, start, perf_counter_ns(), get_ident(), err, attrs))
            if hooks:
                hooks.exit()

    return wrapper


def call_around(fn: Callable, before: Callable[[], None], after: Callable[[], None] | None = None) -> Callable:
    """A stand-in for the C function ``fn`` that calls ``before()``, then ``fn`` with the caller's arguments
    (its result or exception unchanged), then ``after()``; the hooks' own errors are swallowed. Used where
    stepscope must act right before a C call (``tracing.mirror``'s XLA step-marker guard). Marked
    ``__stepscope_guard__``; like every wrapper here, its frame is left out of samples."""

    def guarded(*args, **kwargs):
        try:
            before()
        except Exception:
            pass
        result = fn(*args, **kwargs)
        if after is not None:
            try:
                after()
            except Exception:
                pass
        return result

    guarded.__stepscope_guard__ = True
    guarded.__wrapped__ = fn
    guarded.__doc__ = getattr(fn, "__doc__", None)
    guarded.__name__ = guarded.__qualname__ = getattr(fn, "__name__", "guarded")
    return guarded
