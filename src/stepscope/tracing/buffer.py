"""The span buffer: where finished spans wait until the recorder thread writes them to the store.

A finished span is one tuple, appended by the thread that ran it (``deque.append`` is atomic); the
recorder drains it with ``take()``, which pops exactly the items it returns, so a span appended during
a drain is kept for the next one. The deque is bounded (``MAX_PENDING``): with no session draining it
(``@stepscope.trace`` used without ``init``) memory stays bounded and the oldest spans are dropped.

Span tuple layout (``SPAN_FIELDS``): ``(span_id, parent_id, name, op, start_ns, end_ns, thread_id,
error_type, attrs)``; ``parent_id`` is None for a top-level span, ``error_type`` the exception's
qualified type name or None, ``attrs`` a dict or None. Times are ``perf_counter_ns`` readings.
"""

from __future__ import annotations

import itertools
from collections import deque
from contextvars import ContextVar

SPAN_FIELDS = ("span_id", "parent_id", "name", "op", "start_ns", "end_ns", "thread_id", "error_type", "attrs")

#: The innermost open span in this thread / asyncio task (None outside any span), as a list
#: ``[span_id, start_ns, parent_id, probe, attrs, name, error_type, restore]`` (see ``tracing.probes``;
#: ``probe`` is None for spans opened by ``stepscope.span`` / wrappers, ``restore`` the value to put back).
current_span: ContextVar[list | None] = ContextVar("stepscope_current_span", default=None)


def open_record(sid: int, name: str, start_ns: int = 0, attrs: dict | None = None) -> list:
    """A current-span value for a span opened outside the probes (``stepscope.span``, wrappers): its
    parent is the span current now."""
    prev = current_span.get()
    return [sid, start_ns, prev[0] if prev is not None else None, None, attrs, name, None, prev]

#: Span ids: unique within a process, never 0.
next_span_id = itertools.count(1).__next__

#: At most this many finished spans wait for the recorder (the recorder drains every second).
MAX_PENDING = 1_000_000

#: Finished spans, in the order they ended.
finished: deque[tuple] = deque(maxlen=MAX_PENDING)


def take() -> list[tuple]:
    """Remove and return the spans finished so far (oldest first). Safe beside another taker (a program or a
    benchmark that drains the buffer itself while the recorder flushes): what it took is not returned here."""
    pop = finished.popleft
    out: list[tuple] = []
    append = out.append
    try:
        for _ in range(len(finished)):
            append(pop())
    except IndexError:  # the other taker emptied it meanwhile
        pass
    return out


def full() -> bool:
    """True when the buffer is at its bound (spans may have been dropped)."""
    return len(finished) >= MAX_PENDING
