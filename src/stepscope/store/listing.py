"""The transactions of the store for lists (web UI, ``/api/transactions``): one row per root span with
op "transaction", or per run that has none; filtered by name, sorted, paged in SQL."""

from __future__ import annotations

from dataclasses import dataclass

from . import sampleblock, spanblock
from .db import Store

SORTS = {"start": "wall_ns", "duration": "dur_ns", "name": "name"}


@dataclass(slots=True)
class TransactionRow:
    """``start_wall_ns``: ns since the epoch; ``duration_ns``: ns; ``source``: "run" (stepscope run) or
    "sentry" (ingested); ``span_id``: the root span (None for a run without one)."""

    run_id: str
    span_id: int | None
    name: str
    start_wall_ns: int
    duration_ns: int | None
    status: str
    source: str
    spans: int = 0
    samples: int = 0


def ensure_index(store: Store) -> None:
    """The index the list query needs (spans by op); cheap to keep, built once."""
    store.conn.execute("CREATE INDEX IF NOT EXISTS spans_op ON spans (op, run_id)")


def transactions(store: Store, q: str = "", sort: str = "start", descending: bool = True, limit: int = 100,
                 offset: int = 0) -> tuple[list[TransactionRow], int]:
    """Rows matching ``q`` (case-insensitive substring of the name or run id) and their total count.
    ``sort``: one of ``SORTS``. Raises ValueError for an unknown sort key. Like ``Store.list_runs``, it first
    waits for the envelopes ``stepscope serve`` has acknowledged to be runs (``Store.settle_ingest``)."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
    store.settle_ingest()
    like = f"%{q.lower()}%"
    base = """
      SELECT r.id AS run_id, s.span_id AS span_id, s.name AS name,
             r.anchor_wall_ns + (s.start_ns - r.anchor_mono_ns) AS wall_ns, s.end_ns - s.start_ns AS dur_ns,
             CASE WHEN s.error_type IS NOT NULL THEN 'error' ELSE r.status END AS status,
             coalesce(json_extract(r.env, '$.source'), 'run') AS source
        FROM spans s JOIN runs r ON r.id = s.run_id WHERE s.op = 'transaction' AND r.parent_run IS NULL
      UNION ALL
      SELECT r.id, NULL, json_extract(r.command, '$[0]') || CASE WHEN json_array_length(r.command) > 1 THEN ' …' ELSE '' END,
             r.anchor_wall_ns + (r.start_ns - r.anchor_mono_ns), r.end_ns - r.start_ns, r.status,
             coalesce(json_extract(r.env, '$.source'), 'run')
        FROM runs r WHERE r.parent_run IS NULL AND NOT EXISTS (SELECT 1 FROM spans s WHERE s.op = 'transaction' AND s.run_id = r.id)
    """
    where = "WHERE lower(name) LIKE ? OR lower(run_id) LIKE ?"
    total = store.conn.execute(f"SELECT count(*) FROM ({base}) {where}", (like, like)).fetchone()[0]
    order = SORTS[sort]
    rows = store.conn.execute(
        f"SELECT * FROM ({base}) {where} ORDER BY {order} {'DESC' if descending else 'ASC'} NULLS LAST, run_id "
        f"LIMIT ? OFFSET ?", (like, like, int(limit), int(offset))).fetchall()
    out = [TransactionRow(r[0], r[1], r[2] or "", r[3] or 0, r[4], r[5], r[6]) for r in rows]
    for row in out:
        row.spans = spanblock.count(store.conn, row.run_id)
        row.samples = sampleblock.count(store.conn, row.run_id)
    return out, total
