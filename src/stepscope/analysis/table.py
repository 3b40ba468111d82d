"""A run's spans as compact numpy columns (``SpanTable``), read from the store without one Python object per span.

A million spans take ~50 MB here against ~300 MB as ``model.Span`` objects (each with its name string and attrs
dict). The table is also a sequence of ``Span``: iterating it or indexing it builds the Span objects on the way
(nothing is kept), so code written for a list of spans works on it unchanged; the analyses that must scale
(span stats, phases, the repeat and step tables, the report's aggregation, the exports) read the columns.

``load_run`` reads a run from a ``Store`` with its spans as a table and its samples as numpy arrays (the
``model.Profile`` fields accept arrays), streaming the rows from SQLite in chunks.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

import numpy as np

from ..model import Frame, Profile, RunData, Span
from ..store import profileblock, sampleblock
from ..store.db import StoreError
from ..store.spanblock import BlockError, bodies, header

#: ``parent`` of a span without a parent (span ids are SQLite integers: any int64 but this one)
NO_PARENT = np.iinfo(np.int64).min
_CHUNK = 65_536


class SpanTable:
    """Spans as columns, in ``(start_ns, span_id)`` order (the order ``Store.load`` gives).

    ``id``, ``parent`` (``NO_PARENT`` for none), ``start``, ``end``, ``thread``: int64 (ns for times);
    ``name``: int32 codes into ``names``; ``op``: int16 codes into ``ops``; ``error``: int32 codes into
    ``errors`` (-1: the span ended ok); ``attrs``: row -> attrs dict, only for rows that have attributes.
    """

    __slots__ = ("id", "parent", "name", "names", "op", "ops", "start", "end", "thread", "error", "errors", "attrs",
                 "_by_id", "_dur")

    def __init__(self, id, parent, name, names, op, ops, start, end, thread, error, errors, attrs) -> None:
        self.id, self.parent, self.name, self.names = id, parent, name, names
        self.op, self.ops, self.start, self.end, self.thread = op, ops, start, end, thread
        self.error, self.errors, self.attrs = error, errors, attrs
        self._by_id = None
        self._dur = None

    # -- building --------------------------------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Iterable[tuple]) -> "SpanTable":
        """From ``(span_id, parent_id, name, op, start_ns, end_ns, thread_id, error_type, attrs)`` rows in any
        order (``attrs``: a dict, JSON text or None; ``op`` None reads "function"; ``thread_id`` None reads 0)."""
        names: dict[str, int] = {}
        ops: dict[str, int] = {}
        errors: dict[str, int] = {}
        ints: list[np.ndarray] = []
        codes: list[np.ndarray] = []
        attrs: dict[int, dict] = {}
        n = 0
        it = iter(rows)
        while True:
            chunk = []
            for r in it:
                chunk.append(r)
                if len(chunk) >= _CHUNK:
                    break
            if not chunk:
                break
            sid, par, nm, op, st, en, th, er, at = zip(*chunk)
            ints.append(np.array([sid, [NO_PARENT if p is None else p for p in par], st, en,
                                  [t or 0 for t in th]], dtype=np.int64))
            nsetdefault, osetdefault, esetdefault = names.setdefault, ops.setdefault, errors.setdefault
            codes.append(np.array([[nsetdefault(x, len(names)) for x in nm],
                                   [osetdefault(x or "function", len(ops)) for x in op],
                                   [-1 if x is None else esetdefault(x, len(errors)) for x in er]], dtype=np.int32))
            for k, a in enumerate(at):
                if a:
                    attrs[n + k] = a if isinstance(a, dict) else json.loads(a)
            n += len(chunk)
        if ints:
            iv = np.concatenate(ints, axis=1)
            cv = np.concatenate(codes, axis=1)
        else:
            iv = np.zeros((5, 0), np.int64)
            cv = np.zeros((3, 0), np.int32)
        order = np.lexsort((iv[0], iv[2]))
        if attrs:
            back = np.empty(n, np.int64)
            back[order] = np.arange(n)
            attrs = {int(back[k]): v for k, v in attrs.items()}
        ident = bool(n) and bool((order == np.arange(n)).all())
        take = (lambda a: a) if ident else (lambda a: a[order])
        return cls(take(iv[0]), take(iv[1]), take(cv[0]), list(names), take(cv[1]).astype(np.int16), list(ops),
                   take(iv[2]), take(iv[3]), take(iv[4]), take(cv[2]), list(errors), attrs)

    @classmethod
    def from_spans(cls, spans: Iterable[Span]) -> "SpanTable":
        """From Span objects (any order)."""
        if isinstance(spans, SpanTable):
            return spans
        return cls.from_rows((s.span_id, s.parent_id, s.name, s.op, s.start_ns, s.end_ns, s.thread_id,
                              s.error_type if s.status == "error" else None, s.attrs or None) for s in spans)

    # -- the sequence of Span ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.id)

    def span(self, i: int) -> Span:
        """Row ``i`` as a Span (a new object)."""
        e = int(self.error[i])
        p = int(self.parent[i])
        return Span(int(self.id[i]), None if p == NO_PARENT else p, self.names[self.name[i]], self.ops[self.op[i]],
                    int(self.start[i]), int(self.end[i]), int(self.thread[i]), "ok" if e < 0 else "error",
                    None if e < 0 else self.errors[e], dict(self.attrs.get(int(i), ())) if self.attrs else {})

    def spans(self, rows: Iterable[int] | np.ndarray) -> list[Span]:
        """The Spans of ``rows`` (row indices), in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return []
        ids, par, nm, op = (self.id[rows].tolist(), self.parent[rows].tolist(), self.name[rows].tolist(),
                            self.op[rows].tolist())
        st, en, th, er = self.start[rows].tolist(), self.end[rows].tolist(), self.thread[rows].tolist(), self.error[rows].tolist()
        names, ops, errors, attrs = self.names, self.ops, self.errors, self.attrs
        out = []
        for k, r in enumerate(rows.tolist()):
            e = er[k]
            p = par[k]
            a = attrs.get(r) if attrs else None
            out.append(Span(ids[k], None if p == NO_PARENT else p, names[nm[k]], ops[op[k]], st[k], en[k], th[k],
                            "ok" if e < 0 else "error", None if e < 0 else errors[e], dict(a) if a else {}))
        return out

    def __iter__(self) -> Iterator[Span]:
        n = len(self)
        for lo in range(0, n, 4096):
            yield from self.spans(np.arange(lo, min(n, lo + 4096)))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.spans(np.arange(len(self))[i])
        n = len(self)
        if not -n <= i < n:
            raise IndexError("span index out of range")
        return self.span(i % n)

    def __bool__(self) -> bool:
        return len(self) > 0

    # -- columns --------------------------------------------------------------------------------------
    @property
    def dur(self) -> np.ndarray:
        """Durations (ns, int64)."""
        if self._dur is None:
            self._dur = self.end - self.start
        return self._dur

    def code(self, name: str) -> int:
        """The code of span name ``name`` in ``names`` (-1: no span has it)."""
        try:
            return self.names.index(name)
        except ValueError:
            return -1

    def op_mask(self, op: str) -> np.ndarray:
        """Per row: whether the span's op is ``op``."""
        try:
            return self.op == self.ops.index(op)
        except ValueError:
            return np.zeros(len(self), bool)

    def rows_with_attr(self, key: str) -> np.ndarray:
        """Rows whose attrs hold ``key``, ascending."""
        return np.array(sorted(r for r, a in self.attrs.items() if key in a), dtype=np.int64)

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Row of each span id in ``ids`` (-1 where no span has it)."""
        if self._by_id is None:
            order = np.argsort(self.id, kind="stable")
            self._by_id = (order, self.id[order])
        order, sorted_ids = self._by_id
        ids = np.asarray(ids, dtype=np.int64)
        if not len(sorted_ids):
            return np.full(len(ids), -1, np.int64)
        pos = np.searchsorted(sorted_ids, ids)
        pos = np.minimum(pos, len(sorted_ids) - 1)
        return np.where(sorted_ids[pos] == ids, order[pos], -1)

    def parent_rows(self) -> np.ndarray:
        """Row of each span's parent (-1: none, or not recorded)."""
        return self.rows_of(self.parent)

    def get(self, span_id: int | None) -> Span | None:
        """The span with id ``span_id`` (None when there is none)."""
        if span_id is None:
            return None
        r = int(self.rows_of(np.array([span_id]))[0])
        return None if r < 0 else self.span(r)


def as_table(spans) -> SpanTable:
    """``spans`` (a SpanTable or Span objects) as a SpanTable."""
    return spans if isinstance(spans, SpanTable) else SpanTable.from_spans(spans)


#: spans per ``group_concat`` query of ``read_spans`` (each column one string of about 20 bytes a span)
_READ_CHUNK = 500_000


def _ints(text: str | None) -> np.ndarray:
    """Comma-separated integers (SQLite's ``group_concat``) as int64, parsed in C."""
    if not text:
        return np.zeros(0, np.int64)
    return np.fromstring(text, dtype=np.int64, sep=",")


def read_spans(conn, run_id: str) -> SpanTable:
    """The spans of run ``run_id`` from a store connection, as a SpanTable, without a Python object per span:
    the blocks of ``span_blocks`` (``store.spanblock``) are read as numpy views of their bytes, and the rows of
    ``spans`` (transactions, provisional rows of open spans, every span of a store older than schema 4) as
    ``_read_rows`` says. A provisional row whose span is also in a block is left out (the block's is final).
    Raises ``StoreError`` for a damaged block."""
    t = _read_rows(conn, run_id)
    names = {v: i for i, v in enumerate(t.names)}
    ops = {v: i for i, v in enumerate(t.ops)}
    errors = {v: i for i, v in enumerate(t.errors)}
    ints = [np.stack([t.id, t.parent, t.start, t.end, t.thread])]
    codes = [np.stack([t.name.astype(np.int32), t.op.astype(np.int32), t.error])]
    attrs = dict(t.attrs)
    n = len(t)
    for body in bodies(conn, run_id):
        try:
            k, head, off = header(body)
        except BlockError as e:
            raise _damaged(conn, run_id, e) from None
        ints.append(np.frombuffer(body, "<i8", 5 * k, off).reshape(5, k))
        c = np.frombuffer(body, "<i4", 3 * k, off + 40 * k).reshape(3, k)
        nmap = np.array([names.setdefault(x, len(names)) for x in head["names"]], np.int32)
        omap = np.array([ops.setdefault(x, len(ops)) for x in head["ops"]], np.int32)
        emap = np.array([errors.setdefault(x, len(errors)) for x in head["errors"]] + [-1], np.int32)
        codes.append(np.stack([nmap[c[0]] if len(nmap) else c[0], omap[c[1]] if len(omap) else c[1], emap[c[2]]]))
        for row, a in head["attrs"]:
            attrs[n + row] = a
        n += k
    if len(ints) == 1:
        return t
    iv = np.concatenate(ints, axis=1)
    cv = np.concatenate(codes, axis=1)
    del ints, codes
    keep = None
    provisional = [r for r, a in t.attrs.items() if "stepscope.open" in a]
    if provisional:  # a run lost before its provisional rows were dropped: the block entry is the span's
        prow = np.array(provisional, np.int64)
        dup = np.isin(iv[0, prow], iv[0, len(t):])
        if dup.any():
            keep = np.ones(iv.shape[1], bool)
            keep[prow[dup]] = False
    order = np.lexsort((iv[0], iv[2]))
    if keep is not None:
        order = order[keep[order]]
    back = np.full(iv.shape[1], -1, np.int64)
    back[order] = np.arange(len(order))
    attrs = {int(back[r]): a for r, a in attrs.items() if back[r] >= 0}
    return SpanTable(iv[0, order], iv[1, order], cv[0, order], list(names), cv[1, order].astype(np.int16), list(ops),
                     iv[2, order], iv[3, order], iv[4, order], cv[2, order], list(errors), attrs)


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


def load_run(store, ref: str | None = None) -> RunData:
    """A run as ``Store.load`` gives it, with its spans as a ``SpanTable`` and its samples as numpy columns
    (``sample_wall_ns``/``sample_cpu_ns`` float64, NaN where unknown). Raises ``StoreError`` as ``Store.load``."""
    run_id = store.resolve_id(ref)
    run = store.get_run(run_id)
    c = store.conn
    table = read_spans(c, run_id)
    try:
        frames = [Frame(*r) for r in profileblock.frames(c, run_id)]
        stacks = list(map(profileblock.parse_stack, profileblock.stacks(c, run_id)))
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
    data.memory = store.load_memory(run_id)  # the memory lane (``profiling.memory``)
    return data
