"""A sampler function's step loop, read from its source (stdlib only).

The step loop is the largest ``for``/``while`` statement of the function's own body that is not inside another
loop (nested functions and classes left out; on a tie, the first). Its iterations are the steps of a ``loop``
rule (``core.steprules``). The tracing mechanisms need three lines of it:

- ``head``: the ``for``/``while`` line, run at each iteration's start and once more when the loop ends
  (``sys.monitoring`` LINE events, Python 3.12+);
- ``first``: the first line of the body, run first in every iteration (a LINE event there right after one at
  ``head`` starts an iteration);
- ``first``..``last``: the loop's lines (a LINE event outside them ends the open iteration).

On Python 3.11 the instrumented code calls the probe at the start of the body and after the loop instead
(``tracing.codeswap``), found by ``head`` and ``col``.
"""

from __future__ import annotations

import ast
import linecache
import types
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoopSpec:
    """A step loop: ``head`` (line of the ``for``/``while``), ``col`` (its column), ``first`` (first body line),
    ``last`` (last line of the statement, ``else`` included)."""

    head: int
    col: int
    first: int
    last: int


def _own_loops(body: list) -> list:
    """The loops of a function body not inside another loop (nor in nested scopes)."""
    out = []
    todo = list(body)
    while todo:
        n = todo.pop(0)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While)):
            out.append(n)
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for m in getattr(n, field, None) or ():
                todo.append(m)
        if isinstance(n, (ast.ExceptHandler, ast.match_case)):
            todo.extend(n.body)
    return out


def loop_of_def(node) -> LoopSpec | None:
    """The step loop of a ``def`` node, or None when its body has no loop."""
    loops = [n for n in _own_loops(node.body) if not isinstance(n, ast.AsyncFor)]
    if not loops:
        return None
    best = max(loops, key=lambda n: ((n.end_lineno or n.lineno) - n.lineno, -n.lineno))
    if not best.body or best.body[0].lineno == best.lineno:  # (a one-line loop: no line of its own to see)
        return None
    return LoopSpec(best.lineno, best.col_offset, best.body[0].lineno, best.end_lineno or best.lineno)


def _find_def(tree: ast.AST, code: types.CodeType):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            if first == code.co_firstlineno:
                return node
    return None


def loop_of_code(code: types.CodeType) -> LoopSpec | None:
    """The step loop of the function whose code is ``code`` (from ``linecache``), or None: no source, no loop,
    or a generator/coroutine (their frames suspend: not a step loop here)."""
    if code.co_flags & (0x20 | 0x80 | 0x200):  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
        return None
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    try:
        tree = ast.parse("".join(lines), code.co_filename)
    except (SyntaxError, ValueError):
        return None
    node = _find_def(tree, code)
    return loop_of_def(node) if node is not None else None
