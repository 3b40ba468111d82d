"""A run's spans as compact numpy columns (``SpanTable``): the span column model, without one Python object per span.

A million spans take ~50 MB here against ~300 MB as ``model.Span`` objects (each with its name string and attrs
dict). The table is also a sequence of ``Span``: iterating it or indexing it builds the Span objects on the way
(nothing is kept), so code written for a list of spans works on it unchanged; the analyses that must scale
(span stats, phases, the repeat and step tables, the report's aggregation, the exports) read the columns.

The store's reader (``store.reader.load_run``, ``store.reader.read_spans``) builds the table from the
stored rows and blocks; analysis, export, the report and the web UI read its columns.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

import numpy as np

from .model import Span
from .spanformat import NO_PARENT  # (``parent`` of a span without a parent: the span block format's)
_CHUNK = 65_536


class SpanTable:
    """Spans as columns, in ``(start_ns, span_id)`` order (the order the store's reader gives).

    ``id``, ``parent`` (``NO_PARENT`` for none), ``start``, ``end``, ``thread``: int64 (ns for times);
    ``name``: int32 codes into ``names``; ``op``: int16 codes into ``ops``; ``error``: int32 codes into
    ``errors`` (-1: the span ended ok); ``attrs``: row -> attrs dict, only for rows that have attributes.
    """

    __slots__ = ("id", "parent", "name", "names", "op", "ops", "start", "end", "thread", "error", "errors", "attrs",
                 "_by_id", "_dur", "_memo")

    def __init__(self, id, parent, name, names, op, ops, start, end, thread, error, errors, attrs) -> None:
        self.id, self.parent, self.name, self.names = id, parent, name, names
        self.op, self.ops, self.start, self.end, self.thread = op, ops, start, end, thread
        self.error, self.errors, self.attrs = error, errors, attrs
        self._by_id = None
        self._dur = None
        self._memo: dict = {}

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
        """Row of each span id in ``ids`` (-1 where no span has it). Ids that are dense (stepscope's own:
        ``lo..lo+n-1``, each once) are looked up in a table of rows by id (O(1) each); others by binary search."""
        if self._by_id is None:
            self._by_id = self._id_index()
        ids = np.asarray(ids, dtype=np.int64)
        if self._by_id[0] is None:  # dense: (None, lo, row of each id - lo)
            _, lo, table = self._by_id
            off = ids - lo
            inside = (off >= 0) & (off < len(table))
            return np.where(inside, table[np.where(inside, off, 0)], -1) if len(table) else np.full(len(ids), -1, np.int64)
        order, sorted_ids = self._by_id
        if not len(sorted_ids):
            return np.full(len(ids), -1, np.int64)
        pos = np.searchsorted(sorted_ids, ids)
        pos = np.minimum(pos, len(sorted_ids) - 1)
        return np.where(sorted_ids[pos] == ids, order[pos], -1)

    def _id_index(self) -> tuple:
        dense = rows_by_dense_id(self.id)
        if dense is not None:
            return None, int(self.id.min()), dense
        order = np.argsort(self.id, kind="stable")
        return order, self.id[order]

    def parent_rows(self) -> np.ndarray:
        """Row of each span's parent (-1: none, or not recorded); computed once per table, read-only."""
        return self.memo("parent_rows", lambda: self.rows_of(self.parent))

    def memo(self, key: str, make):
        """``make()``, computed once per table and key: figures derived from the columns that several analyses
        need (a 10M-span run computes each once). A numpy result is made read-only, so that no caller changes
        what the next one reads. The columns must not change after the first call."""
        v = self._memo.get(key)
        if v is None:
            v = make()
            if isinstance(v, np.ndarray):
                v.setflags(write=False)
            self._memo[key] = v
        return v

    def get(self, span_id: int | None) -> Span | None:
        """The span with id ``span_id`` (None when there is none)."""
        if span_id is None:
            return None
        r = int(self.rows_of(np.array([span_id]))[0])
        return None if r < 0 else self.span(r)


def as_table(spans) -> SpanTable:
    """``spans`` (a SpanTable or Span objects) as a SpanTable."""
    return spans if isinstance(spans, SpanTable) else SpanTable.from_spans(spans)


def rows_by_dense_id(ids: np.ndarray) -> np.ndarray | None:
    """The row of each id, indexed by ``id - min(ids)`` (int64), when the ids are dense (``lo..lo+n-1``, each once:
    stepscope numbers a run's spans so); None otherwise. O(n), no sort."""
    n = len(ids)
    if not n:
        return None
    lo = int(ids.min())
    if int(ids.max()) - lo != n - 1:
        return None
    table = np.full(n, -1, np.int64)
    table[ids - lo] = np.arange(n)
    return None if (table < 0).any() else table


#: ``group_rows`` finds each key's rows by one comparison pass per key up to this many distinct keys (then a sort)
FEW_KEYS = 16


def group_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by key: ``(order, lo, hi)``, where ``order[lo[k]:hi[k]]`` are the rows of the k-th smallest key,
    ascending (a stable argsort by key). A few distinct keys (span names, threads) take a pass each over ``keys``
    instead of a sort (10M rows of 10 names: ~10x faster)."""
    keys = np.asarray(keys)
    n = len(keys)
    if not n:
        z = np.zeros(0, np.int64)
        return z, z, z
    lo_k, hi_k = int(keys.min()), int(keys.max())
    if hi_k - lo_k < 4 * FEW_KEYS:
        counts = np.bincount((keys - lo_k).astype(np.int64), minlength=hi_k - lo_k + 1)
        present = np.flatnonzero(counts)
        if len(present) <= FEW_KEYS:
            parts = [np.flatnonzero(keys == lo_k + k) for k in present.tolist()]
            hi = np.cumsum(counts[present])
            return np.concatenate(parts), hi - counts[present], hi
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    bounds = np.flatnonzero(sk[1:] != sk[:-1]) + 1
    return order, np.concatenate(([0], bounds)), np.concatenate((bounds, [n]))
