"""What to trace next: wide functions inside the traced spans that are not traced yet.

Over the samples inside traced spans (all samples when nothing is traced), each sample's stack is cut
below its deepest traced function, so that only work *inside* the traced calls counts. Every function
below the cut gets the sample's time once (its total time inside traced spans). A function is a
candidate when the tracer can resolve it by name: a module-level function or a method of a module-level
class (no ``<locals>``, ``<lambda>``, comprehensions or ``<module>``), not stepscope's own code, not import
machinery, and not generic plumbing (``Module._call_impl``, decorators' wrappers) that would trace
everything. A frame that cannot be named is *lifted* to its nearest caller that can.

Candidates are ranked by total time inside traced spans, skipping a candidate whose samples are (90%)
the same as those of one already chosen (``main`` -> ``run`` -> ``__call__`` chains say the same thing
three times); ``repeats`` counts in how many traced spans' windows the function ran (a function present
in most repeats is a good span). Samples taken during imports (an ``importlib`` frame on the stack) do
not count: module-level work is not something to trace.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..core.model import RunData
from .calltree import ProfileIndex
from ..core.spantable import as_table

#: Never suggested: tracing them would trace everything or nothing useful.
PLUMBING = frozenset({
    "torch.nn.modules.module.Module._call_impl", "torch.nn.modules.module.Module._wrapped_call_impl",
    "torch.utils._contextlib._DecoratorContextManager.__call__", "torch.autograd.grad_mode.no_grad.__enter__",
    "contextlib.ContextDecorator.__call__", "contextlib._GeneratorContextManager.__enter__",
    "contextlib._GeneratorContextManager.__exit__",
})
_UNNAMEABLE = ("<locals>", "<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<module>")
_SKIP_MODULES = ("stepscope.record.launch", "stepscope.record.tracing", "stepscope.record.api", "stepscope.record.session", "importlib", "runpy", "threading", "concurrent.futures", "asyncio.", "selectors",
                 "queue", "contextlib", "functools", "typing", "abc", "<frozen", "_weakrefset")


@dataclass(slots=True)
class Suggestion:
    """A function to trace: its qualified name (what ``--trace`` takes), time inside traced spans (ns),
    its share of that time (0..1), in how many traced windows it ran, and where it is defined."""

    qualified_name: str
    total_ns: float
    share: float
    repeats: int
    file: str
    line: int


def nameable(module: str, function: str) -> bool:
    """True if ``module.function`` is a name the tracer can resolve (see the module doc)."""
    if not module or not function or any(t in function for t in _UNNAMEABLE):
        return False
    if module.startswith(_SKIP_MODULES) or module == "builtins":
        return False
    return f"{module}.{function}" not in PLUMBING


def _matches(label: str, traced: list[str]) -> bool:
    for t in traced:
        tail = ".".join(t.split(".")[-2:])
        if label == t or label.endswith("." + tail) or label == tail:
            return True
    return False


def suggest(data: RunData, index: ProfileIndex | None = None, top: int = 10) -> list[Suggestion]:
    """Functions to trace next, best first (at most ``top``)."""
    index = index or ProfileIndex(data.profile)
    t = as_table(data.spans)
    work = np.flatnonzero(~t.op_mask("transaction"))  # the traced spans' windows, in start order (columns)
    traced_names = sorted({t.names[c] for c in np.unique(t.name[work]).tolist()})
    funcs = index.functions
    if len(work):
        idx, win_of = index.select_many(t.start[work], t.end[work], t.thread[work])
        # a sample inside nested spans appears once per enclosing span: keep it once, in its innermost window
        # (the one that started last)
        order = np.lexsort((win_of, idx))
        idx, win_of = idx[order], win_of[order]
        last = np.ones(len(idx), bool)
        last[:-1] = idx[:-1] != idx[1:]
        idx, win_of = idx[last], win_of[last]
    else:
        idx = index.busy()
        win_of = np.zeros(len(idx), int)
    is_traced = np.array([_matches(f.name, traced_names) for f in funcs] or [False])
    ok = np.array([nameable(f.module, f.name[len(f.module) + 1:] if f.name.startswith(f.module + ".") else f.name)
                   and not is_traced[i] for i, f in enumerate(funcs)] or [False])
    importing = np.array([f.module.startswith("importlib") or f.name.startswith("<frozen importlib") for f in funcs] or [False])
    cands_of: dict[int, tuple[int, ...]] = {}

    def cands(sid: int) -> tuple[int, ...]:
        c = cands_of.get(sid)
        if c is None:
            stack = index.stack_funcs[sid]
            if any(importing[fid] for fid in stack):
                c = ()
            else:
                cut = max((k for k, fid in enumerate(stack) if is_traced[fid]), default=-1)
                c = tuple(dict.fromkeys(fid for fid in stack[cut + 1:] if ok[fid]))
            cands_of[sid] = c
        return c

    # aggregate per stack first: the per-function work is then per distinct stack, not per sample
    stacks = index.stack[idx]
    uniq, inv = np.unique(stacks, return_inverse=True)
    w_stack = np.bincount(inv, weights=index.weight[idx], minlength=len(uniq))
    total = defaultdict(float)
    where: dict[int, dict[int, float]] = defaultdict(dict)
    inside = 0.0
    for u, sid in enumerate(uniq.tolist()):
        c = cands(sid)
        if not c:
            continue
        w = float(w_stack[u])
        inside += w
        for fid in c:
            total[fid] += w
            where[fid][sid] = w
    seen_in = defaultdict(set)
    pairs = np.unique(np.stack([stacks, win_of]), axis=1) if len(idx) else np.empty((2, 0), int)
    for sid, win in zip(pairs[0].tolist(), pairs[1].tolist()):
        for fid in cands(sid):
            seen_in[fid].add(win)
    inside = inside or 1.0
    chosen: list[int] = []
    for f in sorted(total, key=lambda f: -total[f]):
        if len(chosen) >= top:
            break
        mine = where[f]
        if any(sum(w for sid, w in mine.items() if sid in where[c]) >= 0.9 * max(total[f], total[c]) for c in chosen):
            continue  # a chain with a function already chosen: same samples, nothing new
        chosen.append(f)
    return [Suggestion(funcs[f].name, total[f], total[f] / inside, len(seen_in[f]), funcs[f].file, funcs[f].line)
            for f in chosen]
