"""A run's spans and steps as columns for a notebook: a pandas DataFrame when pandas is installed, else ``Columns``
(a dict of equal-length numpy arrays). Times are int64 ns; ``start_ns`` counts from the run's start."""

from __future__ import annotations

import numpy as np

from ..core.model import RunData
from ..core.spantable import as_table
from ..core.steprules import STEP_ATTR


class Columns(dict):
    """Equal-length numpy arrays by column name (what ``ProfiledRun.spans``/``steps`` give without pandas).
    ``len()`` of the dict is the number of columns; ``rows`` the number of rows."""

    @property
    def rows(self) -> int:
        return len(next(iter(self.values()))) if self else 0

    def __repr__(self) -> str:
        return f"<Columns: {self.rows} rows x {len(self)} columns: {', '.join(self)}>"


def frame(cols: dict[str, np.ndarray]):
    """``cols`` as a pandas DataFrame when pandas can be imported, else as ``Columns``."""
    try:
        import pandas as pd
    except ImportError:
        return Columns(cols)
    return pd.DataFrame(cols)


def span_columns(data: RunData):
    """One row per span, in start order: ``id``, ``parent`` (-1: none), ``name``, ``op``, ``thread``, ``start_ns``
    (from the run's start), ``duration_ns``, ``error`` (the exception type, "" when the span ended ok), ``step``
    (``diffusion.step``, -1 when the span is no step)."""
    t = as_table(data.spans)
    n = len(t)
    names = np.array(t.names, dtype=object) if t.names else np.zeros(0, object)
    ops = np.array(t.ops, dtype=object) if t.ops else np.zeros(0, object)
    errors = np.array([""] + list(t.errors), dtype=object)
    step = np.full(n, -1, np.int64)
    for row, attrs in t.attrs.items():
        v = attrs.get(STEP_ATTR) if attrs else None
        if isinstance(v, int):
            step[row] = v
    parent = np.where(t.parent < 0, -1, t.parent).astype(np.int64) if n else np.zeros(0, np.int64)
    return frame({
        "id": np.asarray(t.id, np.int64), "parent": parent,
        "name": names[t.name] if n else np.zeros(0, object), "op": ops[t.op] if n else np.zeros(0, object),
        "thread": np.asarray(t.thread, np.int64), "start_ns": np.asarray(t.start, np.int64) - int(data.run.start_ns),
        "duration_ns": np.asarray(t.end - t.start, np.int64), "error": errors[t.error + 1] if n else np.zeros(0, object),
        "step": step})


def step_columns(data: RunData):
    """One row per denoising step (``analysis.steptable.step_table``; without steps, the repeats of the traced name
    that repeats most): ``call``, ``step``, ``start_ns`` (from the run's start), ``wall_ns``, ``untraced_ns``,
    ``slow``, ``warmup``, then one column per traced name inside the steps (ns). No rows when nothing repeats."""
    from ..analysis.steptable import repeat_table, step_table

    st = step_table(data.spans, max_rows=None)
    if st is None:
        st = repeat_table(data.spans)
    rows = st.rows if st is not None else []
    cols: dict[str, np.ndarray] = {
        "call": np.array([r.call for r in rows], np.int64), "step": np.array([r.step for r in rows], np.int64),
        "start_ns": np.array([r.start_ns - data.run.start_ns for r in rows], np.int64),
        "wall_ns": np.array([r.wall_ns for r in rows], np.int64),
        "untraced_ns": np.array([r.untraced_ns for r in rows], np.int64),
        "slow": np.array([r.slow for r in rows], bool), "warmup": np.array([r.warmup for r in rows], bool)}
    for name in (st.columns if st is not None else []):
        cols[name] = np.array([r.by_name.get(name, 0) for r in rows], np.int64)
    return frame(cols)
