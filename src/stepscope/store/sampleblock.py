"""Sample blocks: a flush's or an ingested profile's samples in one SQLite row, as binary columns (store schema 4;
stdlib only: the recording process and the ingest writer write them).

Why: an ingested profile of 200 samples took 0.55 ms to insert as 200 rows of ``samples`` (each with its run id
text in the table and in the ``(run_id, t_ns)`` index) and 0.04 ms as one block; the recorder's flush writes one
block where it wrote a JSON array per flush. Stores of schema 3 and earlier have only rows of ``samples``;
readers read both (``rows``, ``count``; numpy in ``store.reader.load_run``).

Block layout (little-endian), one ``body`` BLOB::

    b"SSS1" | u32 n | t_ns int64[n] | thread_id int64[n] | stack int64[n] | wall_ns int64[n] | cpu_ns int64[n]

``t_ns``: the run's clock (ns); ``stack``: index into the run's ``stacks``; ``wall_ns``/``cpu_ns``: the wall and
CPU time the sample stands for (ns; -1: unknown, NULL in a row). Samples within a block are in no set order.
"""

from __future__ import annotations

import struct
import sys
from array import array
from operator import itemgetter
from typing import Iterator

MAGIC = b"SSS1"
_HEAD = struct.Struct("<4sI")
COLUMNS = ("t_ns", "thread_id", "stack", "wall_ns", "cpu_ns")
_SWAP = sys.byteorder != "little"


class BlockError(ValueError):
    """A body that is not a sample block of this layout (the message says what is wrong)."""


def _col(samples: list[tuple], k: int) -> array:
    """int64 column ``k`` of ``samples`` (-1 where a tuple is shorter or holds None or a negative value)."""
    if max(map(len, samples), default=0) <= k:  # (ingested samples: no wall or CPU time)
        return array("q", [-1]) * len(samples)
    try:
        a = array("q", map(itemgetter(k), samples))  # (in C; fails on None or a short tuple)
        if min(a, default=0) >= 0:
            return a
    except (TypeError, IndexError):
        pass
    return array("q", [s[k] if len(s) > k and s[k] is not None and s[k] >= 0 else -1 for s in samples])


def encode(samples: list[tuple]) -> bytes:
    """One block from ``(t_ns, thread_id, stack[, wall_ns[, cpu_ns]])`` tuples (missing, None or negative wall/CPU
    times are stored -1: unknown). Raises TypeError/OverflowError for a time, thread id or stack that is not an
    int64."""
    cols = [array("q", map(itemgetter(k), samples)) for k in range(3)] + [_col(samples, 3), _col(samples, 4)]
    if _SWAP:
        for c in cols:
            c.byteswap()
    return b"".join([_HEAD.pack(MAGIC, len(samples)), *(c.tobytes() for c in cols)])


def header(body: bytes) -> int:
    """The number of samples in a block. Raises BlockError."""
    if len(body) < _HEAD.size:
        raise BlockError("sample block too short")
    magic, n = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise BlockError(f"not a sample block (starts {magic!r})")
    if len(body) != _HEAD.size + 40 * n:
        raise BlockError(f"sample block of {n} samples has {len(body)} bytes")
    return n


OFFSET = _HEAD.size


def insert(conn, run_id: str, samples: list[tuple]) -> None:
    """Write ``samples`` (``encode``'s tuples) as one block, in the caller's transaction (nothing for none)."""
    if samples:
        conn.execute("INSERT INTO sample_blocks (run_id, n, body) VALUES (?,?,?)", (run_id, len(samples), encode(samples)))


def bodies(conn, run_id: str) -> Iterator[bytes]:
    """The run's block bodies in the order they were written."""
    for (body,) in conn.execute("SELECT body FROM sample_blocks WHERE run_id = ? ORDER BY rowid", (run_id,)):
        yield body


def rows(conn, run_id: str) -> list[tuple]:
    """Every sample of a run as ``(t_ns, thread_id, stack, wall_ns, cpu_ns)`` (None where unknown), in time order
    (stable: rows first, then blocks in the order written). Raises BlockError for a damaged block."""
    out = conn.execute("SELECT t_ns, thread_id, stack, wall_ns, cpu_ns FROM samples WHERE run_id = ?",
                       (run_id,)).fetchall()
    for body in bodies(conn, run_id):
        n = header(body)
        a = array("q")
        a.frombytes(body[OFFSET:])
        if _SWAP:
            a.byteswap()
        t, th, st, w, c = (a[k * n:(k + 1) * n] for k in range(5))
        out.extend((t[i], th[i], st[i], None if w[i] < 0 else w[i], None if c[i] < 0 else c[i]) for i in range(n))
    out.sort(key=itemgetter(0))
    return out


def count(conn, run_id: str) -> int:
    """Samples stored for a run (rows and block entries)."""
    return conn.execute("SELECT (SELECT count(*) FROM samples WHERE run_id = ?1)"
                        " + ifnull((SELECT sum(n) FROM sample_blocks WHERE run_id = ?1), 0)", (run_id,)).fetchone()[0]


def count_all(conn) -> int:
    """Samples stored for every run."""
    return conn.execute("SELECT (SELECT count(*) FROM samples) + ifnull((SELECT sum(n) FROM sample_blocks), 0)").fetchone()[0]


def any_for(conn, run_id: str) -> bool:
    """Whether the run has a sample."""
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM samples WHERE run_id = ?1)"
                             " OR EXISTS (SELECT 1 FROM sample_blocks WHERE run_id = ?1)", (run_id,)).fetchone()[0])

