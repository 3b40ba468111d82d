"""The span buffer: where finished spans wait until the recorder thread writes them to the store.

A finished span is one tuple, appended by the thread that ran it (``deque.append`` is atomic); the
recorder drains it with ``take()``, which pops exactly the items it returns, so a span appended during
a drain is kept for the next one. The deque is bounded (``MAX_PENDING``): with no session draining it
(``@stepscope.trace`` used without ``init``) memory stays bounded and the oldest spans are dropped.

Span tuple layout (``SPAN_FIELDS``): ``(span_id, parent_id, name, op, start_ns, end_ns, thread_id,
error_type, attrs)``; ``parent_id`` is None for a top-level span, ``error_type`` the exception's
qualified type name or None, ``attrs`` a dict or None. Times are ``perf_counter_ns`` readings.

With the C recorder (``stepscope.record.native``) the plain traced calls finish into its own columns instead;
``take``, ``pending`` and ``clear`` see both, and span ids come from its counter (one sequence for both recorders:
the innermost open span of a thread is the open one with the largest id, ``parent_of``).
"""

from __future__ import annotations

import itertools
from collections import deque
from contextvars import ContextVar

from .. import native
from .record import REC_ID

_ext = native.ext

#: called by ``take`` first (3.13+: ``probes.end_closed``, spans of generators closed with no event), or None; set
#: with ``set_sweep``
sweep = None


def set_sweep(fn) -> None:
    """Have ``take`` call ``fn()`` first, each time (it may append to ``finished``: the spans it ends are then taken
    with the others), in place of the function it called; None: nothing. Set once, by ``tracing.probes`` on 3.13+
    (``end_closed``: the spans of generators that 3.13 closed with no event)."""
    global sweep
    sweep = fn


SPAN_FIELDS = ("span_id", "parent_id", "name", "op", "start_ns", "end_ns", "thread_id", "error_type", "attrs")

#: The innermost open span in this thread / asyncio task (None outside any span), as an open-span record: a list
#: ``[span_id, start_ns, parent_id, probe, attrs, name, error_type, restore]`` whose fields ``spans.record`` names
#: (``probe`` is None for spans opened by ``stepscope.span`` / wrappers, ``restore`` the value to put back).
current_span: ContextVar[list | None] = ContextVar("stepscope_current_span", default=None)


def open_record(sid: int, name: str, start_ns: int = 0, attrs: dict | None = None) -> list:
    """A current-span value for a span opened outside the probes (``stepscope.span``, wrappers): its
    parent is the span current now."""
    prev = current_span.get()
    return [sid, start_ns, parent_of(prev), None, attrs, name, None, prev]


def _parent_of(prev: list | None) -> int | None:
    return prev[REC_ID] if prev else None


#: ``parent_of(current_span.get())``: the parent id of a span opened now (None: top level). With the C recorder also
#: this thread's innermost open native span, when it opened later than the ContextVar's.
parent_of = _ext.parent_of if _ext is not None else _parent_of

#: Span ids: unique within a process, never 0.
next_span_id = _ext.next_id if _ext is not None else itertools.count(1).__next__

#: At most this many finished spans wait for the recorder (the recorder drains every second).
MAX_PENDING = 1_000_000

#: Finished spans, in the order they ended.
finished: deque[tuple] = deque(maxlen=MAX_PENDING)


def take() -> list[tuple]:
    """Remove and return the spans finished so far (oldest first). Safe beside another taker (a program or a
    benchmark that drains the buffer itself while the recorder flushes): what it took is not returned here."""
    if sweep is not None:
        sweep()
    pop = finished.popleft
    out: list[tuple] = []
    append = out.append
    try:
        for _ in range(len(finished)):
            append(pop())
    except IndexError:  # the other taker emptied it meanwhile
        pass
    if _ext is not None:
        more = _ext.take()
        if more:
            if out:
                out.extend(more)
                out.sort(key=_end)  # (two runs in end order: one merge)
            else:
                out = more
    return out


def take_native_blocks(dumps, max_spans: int) -> list[tuple[bytes, int, int]]:
    """Remove the C recorder's finished calls as span blocks (``store.spanblock``'s layout, at most ``max_spans``
    spans each, ``dumps`` writing each header's JSON): ``[(body, n, first span id)]``, oldest first; empty
    without the C recorder or on a big-endian machine (``take`` then returns them as tuples). No Python object is
    made per call: what the recorder thread's flush does for ~0.1 us a call instead of ~1 us."""
    out: list[tuple[bytes, int, int]] = []
    if _ext is None:
        return out
    while True:
        b = _ext.take_block(dumps, max_spans)
        if b is None:
            return out
        out.append(b)


def _end(span: tuple) -> int:
    return span[5]


def pending() -> int:
    """How many finished spans wait for ``take``."""
    return len(finished) + (_ext.pending() if _ext is not None else 0)


def clear() -> None:
    """Drop every finished span (and with the C recorder this thread's open native calls: a forked child)."""
    finished.clear()
    if _ext is not None:
        _ext.clear()


def full() -> bool:
    """True when the buffer is at its bound (spans may have been dropped)."""
    return len(finished) >= MAX_PENDING or (_ext is not None and _ext.dropped() > 0)


def error_name(exc_type: type) -> str:
    """``module.Qualname`` of an exception type (``Qualname`` for builtins)."""
    mod = exc_type.__module__
    return exc_type.__qualname__ if mod in ("builtins", None) else f"{mod}.{exc_type.__qualname__}"


if _ext is not None:
    import sys as _sys

    _ext.setup(current_span, error_name, getattr(getattr(_sys, "monitoring", None), "DISABLE", None), MAX_PENDING)
