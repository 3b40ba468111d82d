"""Span blocks: many spans in one SQLite row, as binary columns (store schema 4; stdlib only: the recording
process and the ingest writer write them).

Why: a million spans as a million rows of the ``spans`` table cost ~2.2 s to insert and ~0.9 s to read back
(SQLite steps every row, Python builds a tuple per row); as 16 blocks they take ~0.3 s to encode and
insert, and numpy reads them without a Python object per span (``store.reader.read_spans``).

Where spans go: a finished span whose op is not ``"transaction"`` goes into a block (``span_blocks``, at most
``BLOCK_SPANS`` spans a row, in the order the spans ended). Transactions (the root span of a run, each
ingested Sentry transaction) and the provisional rows of spans still open (``attrs["stepscope.open"]``)
stay rows of ``spans``, where the run listing and the crash path look for them. Stores of schema 3 and
earlier have only rows; readers read both (``iter_spans``, ``read_spans``), and where a span id has both a
provisional row and a block entry (a run lost before its provisional rows were dropped) the block wins.

The block layout (``SSB1``: magic, sizes, JSON header, then int64 and int32 columns) is ``core.spanformat``'s, the
one module that owns it (the C recorder's writer takes its constants from there too); this module encodes and
decodes it, and writes and reads the ``span_blocks`` rows. The header's ``attrs`` are JSON objects as
``json.dumps(default=str)`` writes them.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from operator import itemgetter
from typing import Callable, Iterator

from ..core.spanformat import CODE_COLUMNS as _CODES
from ..core.spanformat import HEAD, HEADER_ALIGN, MAGIC, NO_ERROR, NO_PARENT, body_bytes
from ..core.spanformat import INT_COLUMNS as _INTS

_HEAD = struct.Struct(HEAD)
#: spans per block: bounds the memory of encoding and decoding one block (~3.4 MB of columns)
BLOCK_SPANS = 65_536
_SWAP = sys.byteorder != "little"


class BlockError(ValueError):
    """A block body that is not a span block of this layout (the message says what is wrong)."""


def _dumps(obj) -> str:
    return json.dumps(obj, default=str, separators=(",", ":"))


#: the header's JSON writer of the blocks this module writes (``record.spans.buffer.take_native_blocks`` takes it too)
dumps_header = _dumps


def _ints(spans: list[tuple], k: int, none: int | None) -> array:
    """An int64 array of field ``k`` of each span, with ``none`` for its None values (TypeError when None)."""
    try:
        return array("q", map(itemgetter(k), spans))  # (in C; raises TypeError at the first None)
    except TypeError:
        if none is None:
            raise
        return array("q", [none if s[k] is None else s[k] for s in spans])


def encode(spans: list[tuple], dumps: Callable[[object], str] = _dumps) -> bytes:
    """One block from span tuples ``(span_id, parent_id, name, op, start_ns, end_ns, thread_id, error_type,
    attrs)`` (``stepscope.record.spans.buffer.SPAN_FIELDS``; ``attrs`` a dict or None, ``op`` None reads
    "function", ``parent_id`` None is stored NO_PARENT, ``thread_id`` None reads 0). Raises OverflowError for an
    integer outside int64 and TypeError for a span id or time that is not an integer. ``dumps`` writes the
    header's JSON (any function giving JSON text, e.g. orjson's; it must write what it cannot serialise as text)."""
    n = len(spans)
    nm, op, er = (list(map(itemgetter(k), spans)) for k in (2, 3, 7))
    names = {x: k for k, x in enumerate(dict.fromkeys(nm))}
    if None in (ops := dict.fromkeys(op)):
        op = ["function" if x is None else x for x in op]
        ops = dict.fromkeys(op)
    ops = {x: k for k, x in enumerate(ops)}
    name_c = array("i", map(names.__getitem__, nm))
    op_c = array("i", [0]) * n if len(ops) == 1 else array("i", map(ops.__getitem__, op))
    errors: dict[str, int] = {}
    if er.count(None) == n:
        err_c = array("i", [NO_ERROR]) * n
    else:
        eset = errors.setdefault
        err_c = array("i", [NO_ERROR if x is None else eset(x, len(errors)) for x in er])
    at = list(map(itemgetter(8), spans))
    attrs = [] if at.count(None) == n else [[k, a] for k, a in enumerate(at) if a]
    header = dumps({"names": list(names), "ops": list(ops), "errors": list(errors), "attrs": attrs}).encode()
    header += b" " * (-len(header) % HEADER_ALIGN)
    ints = {"id": _ints(spans, 0, None), "parent": _ints(spans, 1, NO_PARENT), "start": _ints(spans, 4, None),
            "end": _ints(spans, 5, None), "thread": _ints(spans, 6, 0)}
    codes = {"name": name_c, "op": op_c, "error": err_c}
    cols = [*map(ints.__getitem__, _INTS), *map(codes.__getitem__, _CODES)]  # (the format's column order)
    if _SWAP:
        for c in cols:
            c.byteswap()
    return b"".join([_HEAD.pack(MAGIC, n, len(header)), header, *(c.tobytes() for c in cols)])


def header(body: bytes) -> tuple[int, dict, int]:
    """``(n, header dict, offset of the first column)`` of a block. Raises BlockError."""
    if len(body) < _HEAD.size:
        raise BlockError("span block too short")
    magic, n, h = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise BlockError(f"not a span block (starts {magic!r})")
    off = _HEAD.size + h
    if len(body) != body_bytes(n, h):
        raise BlockError(f"span block of {n} spans has {len(body)} bytes")
    try:
        head = json.loads(body[_HEAD.size:off])
    except ValueError as e:
        raise BlockError(f"span block header is not JSON ({e})") from None
    return n, head, off


def columns(body: bytes) -> tuple[int, dict, dict[str, array]]:
    """``(n, header, columns)`` of a block: columns ``id parent start end thread`` (array 'q') and ``name op
    error`` (array 'i', codes into the header's lists). Raises BlockError."""
    n, head, off = header(body)
    out: dict[str, array] = {}
    for key, code, size in [(k, "q", 8) for k in _INTS] + [(k, "i", 4) for k in _CODES]:
        a = array(code)
        a.frombytes(body[off:off + n * size])
        if _SWAP:
            a.byteswap()
        out[key] = a
        off += n * size
    return n, head, out


def spans_of(body: bytes) -> Iterator[tuple]:
    """The span tuples of a block (``SPAN_FIELDS`` order; ``attrs`` a dict or None). Raises BlockError."""
    n, head, c = columns(body)
    names, ops, errors = head["names"], head["ops"], head["errors"]
    attrs = {k: a for k, a in head["attrs"]}
    for k, (sid, p, s, e, t, nm, op, er) in enumerate(zip(c["id"], c["parent"], c["start"], c["end"], c["thread"],
                                                          c["name"], c["op"], c["error"])):
        yield (sid, None if p == NO_PARENT else p, names[nm], ops[op], s, e, t, None if er < 0 else errors[er],
               attrs.get(k))


def split(spans: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """``(transactions, others)``: the spans that stay rows (op "transaction") and those that go into blocks."""
    if "transaction" not in map(itemgetter(3), spans):  # (in C)
        return [], spans
    return [s for s in spans if s[3] == "transaction"], [s for s in spans if s[3] != "transaction"]


def insert(conn, run_id: str, spans: list[tuple], dumps: Callable[[object], str] = _dumps) -> int:
    """Write ``spans`` (no transactions: see ``split``) as blocks of at most ``BLOCK_SPANS`` in the caller's
    transaction; returns the number of blocks. ``dumps``: as ``encode``'s."""
    k = 0
    for lo in range(0, len(spans), BLOCK_SPANS):
        chunk = spans[lo:lo + BLOCK_SPANS]
        insert_body(conn, run_id, encode(chunk, dumps), len(chunk), chunk[0][0])
        k += 1
    return k


def insert_body(conn, run_id: str, body: bytes, n: int, first_id: int) -> None:
    """Write one block already encoded (``record.spans.buffer.take_native_blocks``: ``n`` spans, the first with id
    ``first_id``) in the caller's transaction."""
    conn.execute("INSERT INTO span_blocks (run_id, n, first_id, body) VALUES (?,?,?,?)", (run_id, n, first_id, body))


def ids_of(body: bytes) -> array:
    """The span ids of a block (array 'q'). Raises BlockError."""
    n, _, off = header(body)
    a = array("q")
    a.frombytes(body[off:off + 8 * n])
    if _SWAP:
        a.byteswap()
    return a


def bodies(conn, run_id: str) -> Iterator[bytes]:
    """The run's block bodies in the order they were written."""
    for (body,) in conn.execute("SELECT body FROM span_blocks WHERE run_id = ? ORDER BY rowid", (run_id,)):
        yield body


def iter_spans(conn, run_id: str) -> Iterator[tuple]:
    """Every stored span of a run as a tuple (``SPAN_FIELDS`` order, ``attrs`` a dict or None), in no particular
    order: the ``spans`` rows, then the blocks; a provisional row whose span is also in a block is left out.
    Raises BlockError for a damaged block."""
    rows = conn.execute("SELECT span_id, parent_id, name, op, start_ns, end_ns, thread_id, error_type, attrs"
                        " FROM spans WHERE run_id = ?", (run_id,)).fetchall()
    provisional = {r[0] for r in rows if r[8] and '"stepscope.open"' in r[8]}
    in_blocks: set[int] = set()
    has_blocks = False
    for body in bodies(conn, run_id):
        has_blocks = True
        for s in spans_of(body):
            if provisional and s[0] in provisional:
                in_blocks.add(s[0])
            yield s
    for r in rows:
        if has_blocks and r[0] in in_blocks:
            continue
        yield (r[0], r[1], r[2], r[3] or "function", r[4], r[5], r[6] or 0, r[7], json.loads(r[8]) if r[8] else None)


def count(conn, run_id: str, transactions: bool = True) -> int:
    """Spans stored for a run (rows and block entries); without ``transactions``, the traced spans only (the run's
    transactions are rows: see ``split``): the count every command shows."""
    rows = "count(*)" if transactions else "ifnull(sum(op != 'transaction'), 0)"
    return conn.execute(f"SELECT (SELECT {rows} FROM spans WHERE run_id = ?1)"
                        " + ifnull((SELECT sum(n) FROM span_blocks WHERE run_id = ?1), 0)", (run_id,)).fetchone()[0]


def count_all(conn) -> int:
    """Spans stored for every run."""
    return conn.execute("SELECT (SELECT count(*) FROM spans) + ifnull((SELECT sum(n) FROM span_blocks), 0)").fetchone()[0]


def named(conn, run_id: str, match: Callable[[str], bool]) -> Iterator[tuple]:
    """The run's spans whose name ``match`` accepts (tuples as ``iter_spans``, in no particular order), without
    building the other spans' tuples. Raises BlockError for a damaged block."""
    for s in conn.execute("SELECT span_id, parent_id, name, op, start_ns, end_ns, thread_id, error_type, attrs"
                          " FROM spans WHERE run_id = ?", (run_id,)):
        if match(s[2]):
            yield (*s[:8], json.loads(s[8]) if s[8] else None)
    for body in bodies(conn, run_id):
        n, head, c = columns(body)
        codes = {k for k, nm in enumerate(head["names"]) if match(nm)}
        if not codes:
            continue
        attrs = {k: a for k, a in head["attrs"]}
        for k, code in enumerate(c["name"]):
            if code in codes:
                p, er = c["parent"][k], c["error"][k]
                yield (c["id"][k], None if p == NO_PARENT else p, head["names"][code], head["ops"][c["op"][k]],
                       c["start"][k], c["end"][k], c["thread"][k], None if er < 0 else head["errors"][er],
                       attrs.get(k))
