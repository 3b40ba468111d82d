"""The one reader of a run: ``load_run`` (the run, its spans as a ``SpanTable``, its samples as numpy columns,
threads and memory lane) and ``read_spans`` (a run's spans only), used by the CLI, the report, the web UI,
``diff`` and ``capture`` alike.

Read without one Python object per span or sample: the blocks of ``span_blocks`` (``store.spanblock``) and
``sample_blocks`` (``store.sampleblock``) are read as numpy views of their bytes, the rows of ``spans`` as one
``group_concat`` string per column and range of span ids (parsed by numpy), the ``samples`` rows in chunks.
A failure (a damaged block or file) raises ``StoreError`` with one line naming the store's ``runs.db``.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Iterator

import numpy as np

from ..core.model import Frame, Profile, RunData, root_at_cells
from ..core.spanformat import CODE_COLUMNS, INT_COLUMNS
from ..core.spantable import SpanTable, rows_by_dense_id
from . import profileblock, sampleblock
from .db import Store, StoreError
from .schema import damaged
from .spanblock import BlockError, bodies, header

#: a span block's int64 and int32 columns (``core.spanformat``: id parent start end thread, name op error)
_NI, _NC = len(INT_COLUMNS), len(CODE_COLUMNS)
assert INT_COLUMNS == ("id", "parent", "start", "end", "thread") and CODE_COLUMNS == ("name", "op", "error")
#: rows of ``samples`` fetched at a time
_CHUNK = 65_536
#: spans per ``group_concat`` query of ``read_spans`` (each column one string of about 20 bytes a span)
_READ_CHUNK = 500_000


def _ints(text: str | None) -> np.ndarray:
    """Comma-separated integers (SQLite's ``group_concat``) as int64, parsed in C."""
    if not text:
        return np.zeros(0, np.int64)
    return np.fromstring(text, dtype=np.int64, sep=",")


def read_spans(store: Store, run_id: str) -> SpanTable:
    """The spans of run ``run_id`` as a SpanTable, without a Python object per span: the blocks of
    ``span_blocks`` (``store.spanblock``) are read as numpy views of their bytes, and the rows of ``spans``
    (transactions, provisional rows of open spans, every span of a store older than schema 4) as ``_read_rows``
    says. A provisional row whose span is also in a block is left out (the block's is final). Raises
    ``StoreError`` for a damaged block or file."""
    try:
        return _read_spans(store.conn, run_id)
    except sqlite3.Error as e:
        raise StoreError(damaged(store.path / "runs.db", e)) from None


def _read_spans(conn, run_id: str) -> SpanTable:
    t = _read_rows(conn, run_id)
    total = len(t) + (conn.execute("SELECT ifnull(sum(n), 0) FROM span_blocks WHERE run_id = ?", (run_id,)).fetchone()[0])
    if total == len(t):
        return t
    names = {v: i for i, v in enumerate(t.names)}
    ops = {v: i for i, v in enumerate(t.ops)}
    errors = {v: i for i, v in enumerate(t.errors)}
    # every column made once at its final size and filled block by block (no stacking, no concatenation: the peak
    # is the columns and one block); the row-order is then applied one column at a time
    iv = np.empty((_NI, total), np.int64)
    cv = np.empty((_NC, total), np.int32)
    n = len(t)
    for k_, col in enumerate((t.id, t.parent, t.start, t.end, t.thread)):
        iv[k_, :n] = col
    cv[0, :n], cv[1, :n], cv[2, :n] = t.name, t.op, t.error
    attrs = dict(t.attrs)
    for body in bodies(conn, run_id):
        try:
            k, head, off = header(body)
        except BlockError as e:
            raise _damaged(conn, run_id, e) from None
        if n + k > total:  # (the blocks' ``n`` disagree with their headers: a damaged store)
            raise _damaged(conn, run_id, BlockError(f"a block holds more spans than its row says ({n + k} > {total})"))
        iv[:, n:n + k] = np.frombuffer(body, "<i8", _NI * k, off).reshape(_NI, k)  # (core.spanformat's columns)
        c = np.frombuffer(body, "<i4", _NC * k, off + 8 * _NI * k).reshape(_NC, k)
        nmap = np.array([names.setdefault(x, len(names)) for x in head["names"]], np.int32)
        omap = np.array([ops.setdefault(x, len(ops)) for x in head["ops"]], np.int32)
        emap = np.array([errors.setdefault(x, len(errors)) for x in head["errors"]] + [-1], np.int32)
        cv[0, n:n + k] = nmap[c[0]] if len(nmap) else c[0]
        cv[1, n:n + k] = omap[c[1]] if len(omap) else c[1]
        cv[2, n:n + k] = emap[c[2]]
        for row, a in head["attrs"]:
            attrs[n + row] = a
        n += k
        del body, c
    if n < total:
        iv, cv = iv[:, :n], cv[:, :n]
    keep = None
    provisional = [r for r, a in t.attrs.items() if "stepscope.open" in a]
    if provisional:  # a run lost before its provisional rows were dropped: the block entry is the span's
        prow = np.array(provisional, np.int64)
        dup = np.isin(iv[0, prow], iv[0, len(t):])
        if dup.any():
            keep = np.ones(iv.shape[1], bool)
            keep[prow[dup]] = False
    order = _start_order(iv[0], iv[2])
    if keep is not None:
        order = order[keep[order]]
    if attrs:  # (few rows: their new positions through the inverse of the order)
        back = np.full(iv.shape[1], -1, np.int64)
        back[order] = np.arange(len(order))
        attrs = {int(back[r]): a for r, a in attrs.items() if back[r] >= 0}
        del back
    sid, par, st, en, th = (iv[j].take(order) for j in range(_NI))
    del iv
    nm, op, er = cv[0].take(order), cv[1].take(order).astype(np.int16), cv[2].take(order)
    return SpanTable(sid, par, nm, list(names), op, list(ops), st, en, th, er, list(errors), attrs)


def _start_order(ids: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The rows in ``(start, id)`` order. Fast path, in O(n): stepscope numbers spans as they start, so ids are dense
    (one run: ``min..min+n-1``, each once) and their order is usually the start order already; the rows placed by
    id then only need checking. Otherwise (ids from elsewhere, or threads whose starts interleave out of id order)
    a ``lexsort``."""
    by_id = rows_by_dense_id(ids)
    if by_id is not None:
        s = start[by_id]
        if not (s[1:] < s[:-1]).any():
            return by_id
    return np.lexsort((ids, start))


def _damaged(conn, run_id: str, e: Exception) -> StoreError:
    """The one-line error for a damaged block of run ``run_id``, naming the store's file."""
    db = next((r[2] for r in conn.execute("PRAGMA database_list") if r[1] == "main"), "") or "the store"
    return StoreError(f"{db}: run {run_id}: {e}")


def _read_rows(conn, run_id: str) -> SpanTable:
    """The run's rows of the ``spans`` table as a SpanTable, without a Python object per row: SQLite joins each
    name to its code and each column of a range of span ids into one string (``group_concat``), which numpy
    parses; spans with an error or attributes (few) are read row by row."""
    c = conn
    n, lo, hi = c.execute("SELECT count(*), min(span_id), max(span_id) FROM spans WHERE run_id = ?", (run_id,)).fetchone()
    names = [r[0] for r in c.execute("SELECT DISTINCT name FROM spans WHERE run_id = ?", (run_id,))]
    ops = list(dict.fromkeys(r[0] or "function" for r in c.execute("SELECT DISTINCT op FROM spans WHERE run_id = ?",
                                                                       (run_id,))))
    c.execute("CREATE TEMP TABLE IF NOT EXISTS _stepscope_names (value TEXT PRIMARY KEY, code INTEGER) WITHOUT ROWID")
    c.execute("DELETE FROM temp._stepscope_names")
    c.executemany("INSERT INTO temp._stepscope_names VALUES (?,?)", [(v, i) for i, v in enumerate(names)])
    op_case = "CASE ifnull(s.op, 'function') " + " ".join(f"WHEN ?{4 + i} THEN {i}" for i in range(len(ops))) + " ELSE 0 END"
    q = ("SELECT group_concat(s.span_id), group_concat(ifnull(s.parent_id, -9223372036854775807 - 1)),"
         " group_concat(s.start_ns), group_concat(s.end_ns), group_concat(ifnull(s.thread_id, 0)), group_concat(n.code),"
         f" group_concat({op_case if ops else 0})"
         " FROM spans s JOIN temp._stepscope_names n ON n.value = s.name"
         " WHERE s.run_id = ?1 AND s.span_id BETWEEN ?2 AND ?3")
    cols: list[list[np.ndarray]] = [[] for _ in range(7)]
    if n:
        parts = -(-n // _READ_CHUNK)
        width = -(-(hi - lo + 1) // parts)  # ranges of span ids (ids are dense when stepscope recorded them)
        a = lo
        while a <= hi:
            b = min(a + width - 1, hi)
            row = c.execute(q, (run_id, a, b, *ops)).fetchone()
            for k in range(7):
                cols[k].append(_ints(row[k]))
            a = b + 1
    c.execute("DELETE FROM temp._stepscope_names")
    sid, par, st, en, th, nm, op = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in cols)
    order = np.lexsort((sid, st))
    t = SpanTable(sid[order], par[order], nm[order].astype(np.int32), names, op[order].astype(np.int16), ops,
                  st[order], en[order], th[order], np.full(len(sid), -1, np.int32), [], {})
    errs = c.execute("SELECT span_id, error_type FROM spans WHERE run_id = ? AND error_type IS NOT NULL", (run_id,)).fetchall()
    if errs:
        codes: dict[str, int] = {}
        rows = t.rows_of(np.array([r[0] for r in errs], dtype=np.int64))
        for r, (_, e) in zip(rows.tolist(), errs):
            if r >= 0:
                t.error[r] = codes.setdefault(e, len(codes))
        t.errors = list(codes)
    with_attrs = c.execute("SELECT span_id, attrs FROM spans WHERE run_id = ? AND attrs IS NOT NULL", (run_id,)).fetchall()
    if with_attrs:
        rows = t.rows_of(np.array([r[0] for r in with_attrs], dtype=np.int64))
        t.attrs = {int(r): json.loads(a) for r, (_, a) in zip(rows.tolist(), with_attrs) if r >= 0 and a}
    return t


def load_run(store: Store, ref: str | None = None) -> RunData:
    """Everything recorded for a run (``ref``: as ``Store.resolve_id`` takes it), with its spans as a
    ``SpanTable`` and its samples as numpy columns (``sample_wall_ns``/``sample_cpu_ns`` float64, NaN where
    unknown). Raises ``StoreError`` for an unknown run, a damaged block or file (one line naming ``runs.db``)."""
    try:
        return _load_run(store, ref)
    except sqlite3.Error as e:
        raise StoreError(damaged(store.path / "runs.db", e)) from None


def _load_run(store: Store, ref: str | None) -> RunData:
    run_id = store.resolve_id(ref)
    data = _load_one(store, run_id)
    procs = store.process_runs(run_id) if data.run.parent_run is None else []
    if procs:
        from .jobjoin import join

        data = join(data, [_load_one(store, r.id) for r in procs])
    return data


def load_parts(store: Store, ref: str | None = None) -> Iterator[RunData]:
    """The run ``ref`` (as ``Store.resolve_id`` takes it) and each of its job's process runs, one at a time and each
    on its own ids and clock (not joined: ``load_run`` joins them): the top run first, then the process runs in start
    order (``Store.process_runs``). One ``RunData`` is held at a time by a caller that drops each before the next (the
    exports that send a process at a time). Raises ``StoreError`` as ``load_run`` does."""
    try:
        run_id = store.resolve_id(ref)
        ids = [run_id] + [r.id for r in store.process_runs(run_id)]
    except sqlite3.Error as e:
        raise StoreError(damaged(store.path / "runs.db", e)) from None
    for rid in ids:
        try:
            part = _load_one(store, rid)
        except sqlite3.Error as e:
            raise StoreError(damaged(store.path / "runs.db", e)) from None
        yield part


def _load_one(store: Store, run_id: str) -> RunData:
    run = store.get_run(run_id)
    c = store.conn
    table = _read_spans(c, run_id)
    try:
        frames = [Frame(*r) for r in profileblock.frames(c, run_id)]
        stacks = root_at_cells(frames, list(map(profileblock.parse_stack, profileblock.stacks(c, run_id))))
    except profileblock.BlockError as e:
        raise StoreError(f"{store.path / 'runs.db'}: run {run_id}: {e}") from None
    cur = c.execute("SELECT t_ns, thread_id, stack, coalesce(wall_ns, -1), coalesce(cpu_ns, -1) FROM samples"
                    " WHERE run_id = ? ORDER BY t_ns", (run_id,))
    parts = []
    while True:
        rows = cur.fetchmany(_CHUNK)
        if not rows:
            break
        parts.append(np.array(rows, dtype=np.int64).reshape(-1, 5))
    blocks = 0
    for body in sampleblock.bodies(c, run_id):  # (store.sampleblock: five int64 columns each)
        try:
            k = sampleblock.header(body)
        except sampleblock.BlockError as e:
            raise _damaged(c, run_id, e) from None
        parts.append(np.frombuffer(body, "<i8", 5 * k, sampleblock.OFFSET).reshape(5, k).T)
        blocks += 1
    s = np.concatenate(parts) if parts else np.zeros((0, 5), np.int64)
    if blocks:
        s = s[np.argsort(s[:, 0], kind="stable")]
    wall = s[:, 3].astype(np.float64)
    wall[s[:, 3] < 0] = np.nan
    cpu = s[:, 4].astype(np.float64)
    cpu[s[:, 4] < 0] = np.nan
    profile = Profile(
        frames=frames, stacks=stacks, sample_t_ns=s[:, 0].copy(), sample_thread=s[:, 1].copy(),
        sample_stack=s[:, 2].copy(), sample_wall_ns=wall, sample_cpu_ns=cpu,
        hz=float(run.settings.get("profiles_hz") or 0.0),
    )
    store.load_threads(run_id, profile)
    run.span_count = len(table) - int(table.op_mask("transaction").sum())  # traced spans: every command's count
    run.sample_count = len(s)
    data = RunData(run, table, profile)  # type: ignore[arg-type]
    data.memory = store.load_memory(run_id)  # the memory lane (``record.memory.history``)
    return data
