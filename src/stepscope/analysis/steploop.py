"""Where the last denoising step of a call ends: its loop iteration, read from the samples.

A step's window runs to the next step's first traced span, so the work after a step's traced calls
(``callback_on_step_end``, a preview, scheduler glue) counts in it. The last step has no next step; its
traced spans end with its scheduler step (or denoiser call), before the callback runs. The samples tell
how long its loop iteration really lasted:

1. the *loop frame* is the deepest frame shared by every sample of the steps' windows, cut above the
   traced step spans' own functions and above frames whose line never changes (call plumbing): the
   function that runs the denoising loop (``StableDiffusionPipeline.__call__``);
2. the loop's body is the innermost ``for``/``while`` statement of that function's source (``ast``) that
   holds every line the loop frame was sampled at inside the windows (without the source: the range of
   those lines);
3. after the last step's spans end, the window extends over the thread's samples while they are still
   in the loop frame at a line of the body; it ends at the last such sample (before ``limit``).

The samples also split a thread's steps into calls when no traced span encloses them (``analysis.steptable``):
``steps_driver`` is the function that drives the steps, ``left_driver`` whether the thread left it between two.
"""

from __future__ import annotations

import ast
import linecache
from functools import lru_cache

import numpy as np

from ..core.model import Span

#: Extend by at most this much past the last traced span (a runaway callback is still one iteration).
MAX_EXTEND_NS = 600 * 1_000_000_000


def _common_prefix(index, idx: np.ndarray) -> tuple[int, ...]:
    uniq, _, _ = index.stack_weights(idx)
    prefix: tuple[int, ...] | None = None
    for sid in uniq.tolist():
        st = index.stack_funcs[sid]
        if prefix is None:
            prefix = st
            continue
        n = 0
        for a, b in zip(prefix, st):
            if a != b:
                break
            n += 1
        prefix = prefix[:n]
    return prefix or ()


def _lines_at(index, idx: np.ndarray, depth: int) -> set[int]:
    uniq, _, _ = index.stack_weights(idx)
    frames = index.profile.frames
    out = set()
    for sid in uniq.tolist():
        st = index.profile.stacks[sid]
        if len(st) > depth:
            out.add(frames[st[depth]].line)
    return out


@lru_cache(maxsize=64)
def _loops(file: str) -> tuple[tuple[int, int], ...]:
    """``(first line, last line)`` of every for/while statement in ``file`` (empty when unreadable)."""
    src = "".join(linecache.getlines(file))
    if not src:
        return ()
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return ()
    return tuple((n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
                 if isinstance(n, (ast.For, ast.AsyncFor, ast.While)))


def loop_body(file: str, lines: set[int]) -> tuple[int, int]:
    """The innermost loop of ``file`` holding all ``lines``, as ``(first, last)``; else their range."""
    lo, hi = min(lines), max(lines)
    best = None
    for a, b in _loops(file):
        if a <= lo and hi <= b and (best is None or b - a < best[1] - best[0]):
            best = (a, b)
    return best or (lo, hi)


def last_step_end(index, windows: list[tuple[int, int]], start: int, end: int, thread: int, limit: int | None,
                  step_names: frozenset[str] = frozenset()) -> int:
    """The end (ns) of the last step whose traced spans run ``[start, end)``; ``windows``: the call's
    earlier steps' windows. Returns ``end`` when the samples cannot tell (module doc)."""
    parts = [index.select(a, b, thread) for a, b in windows + [(start, end)]]
    idx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if len(idx) < 3:
        return end
    prefix = _common_prefix(index, idx)
    funcs = index.functions
    cut = next((d for d, fid in enumerate(prefix) if funcs[fid].name in step_names), len(prefix))
    prefix = prefix[:cut]
    depth = len(prefix) - 1
    while depth >= 0:
        lines = _lines_at(index, idx, depth)
        if len(lines) >= 2:
            break
        depth -= 1
    if depth < 0:
        return end
    prefix = prefix[: depth + 1]
    body = loop_body(funcs[prefix[-1]].file, lines)
    stop = min(limit if limit is not None else end + MAX_EXTEND_NS, end + MAX_EXTEND_NS)
    after = index.select(end, stop, thread)
    frames = index.profile.frames
    new_end = end
    for j in after.tolist():
        sid = int(index.stack[j])
        st = index.stack_funcs[sid]
        if len(st) <= depth or st[: depth + 1] != prefix:
            break
        line = frames[index.profile.stacks[sid][depth]].line
        if not body[0] <= line <= body[1]:
            break
        new_end = int(index.t[j])
    return new_end


def steps_driver(index, ms: list[Span]) -> int | None:
    """The function that drives the steps ``ms`` (top-level tagged spans of one thread): the deepest frame that
    every sample inside them has below the step's own functions (the denoising loop's function: a pipeline's
    ``__call__``, a node's ``invoke``), torch's and diffusers' plumbing left out; None when the samples do not
    tell (no sample, or nothing but the thread's root in common)."""
    pick = ms if len(ms) <= 256 else [ms[k] for k in np.linspace(0, len(ms) - 1, 256).astype(int)]
    idx, _ = index.select_many(np.array([s.start_ns for s in pick], np.int64), np.array([s.end_ns for s in pick], np.int64),
                               np.array([s.thread_id for s in pick], np.int64))
    if not len(idx):
        return None
    stacks = [index.stack_funcs[int(sid)] for sid in np.unique(index.stack[idx]).tolist()]
    common = list(stacks[0])
    for st in stacks[1:]:
        n = 0
        while n < len(common) and n < len(st) and common[n] == st[n]:
            n += 1
        del common[n:]
    names = {s.name for s in ms}
    funcs = index.functions
    cut = next((k for k, f in enumerate(common) if funcs[f].name in names), len(common))
    common = common[:cut]
    while common and funcs[common[-1]].name.startswith(("torch.", "diffusers.utils.", "contextlib.", "functools.")):
        common.pop()
    if len(common) < 2:  # (the thread's root alone says nothing)
        return None
    return common[-1]


def left_driver(index, thread: int, a: int, b: int, driver: int) -> bool:
    """True when ``thread`` left the steps' driving function in ``[a, b)``: a sample of it there has ``driver``
    nowhere on its stack (the loop returned: the worker took up other work or waited for the next request; a
    slow callback called from the loop keeps it)."""
    idx = index.select(a, b, thread)
    if not len(idx):
        return False
    return any(driver not in index.stack_funcs[sid] for sid in np.unique(index.stack[idx]).tolist())
