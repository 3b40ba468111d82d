"""Write a validated envelope (``sentry.Batch``) into the store as stepscope runs, in the caller's SQLite
transaction (so an envelope is stored whole or not at all).

One transaction event becomes one run: its clock is the transaction's (t = wall ns - the transaction's
start), its root span has op "transaction" (a row of ``spans``), its spans are one block of ``span_blocks``, spans keep their Sentry ids in ``attrs["sentry.span_id"]``.
Profiles are linked whatever order they arrive in: a v1 profile to the event id it names, a v2 chunk to
every transaction of the same ``profiler_id`` it overlaps (only the samples inside the transaction are
kept). Profiles whose transaction has not arrived yet wait in ``ingest_pending``; chunks are kept in
``ingest_chunks`` for transactions that arrive after them (both for a day, see ``prune``). Re-sent
envelopes are stored once.
"""

from __future__ import annotations

import json
import sqlite3
import time

import orjson

from ..store import profileblock, sampleblock, spanblock
from ..store.schema import INGEST as SCHEMA  # the layout lives in store/schema.py
from ..tracing.steps import STEP_ATTR, steps_from_names
from .sentry import SENTRY_PYTHON_HZ, Batch, ProfileRecord, TransactionRecord



def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the ingest tables (``SCHEMA``) when missing."""
    conn.executescript(SCHEMA)


def _run_id(conn: sqlite3.Connection, tx: TransactionRecord) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(tx.start_ns / 1e9))
    for k in (8, 16, 32):
        rid = f"{stamp}-{tx.event_id[:k]}"
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone() is None:
            return rid
    return f"{stamp}-{tx.event_id}-{time.time_ns()}"


def _record_to_blob(p: ProfileRecord) -> bytes:
    return orjson.dumps({"kind": p.kind, "key": p.key, "profiler_id": p.profiler_id, "frames": p.frames,
                         "stacks": p.stacks, "samples": p.samples,
                         "thread_names": {str(k): v for k, v in p.thread_names.items()},
                         "transaction_ids": p.transaction_ids})


def _record_from_blob(b: bytes) -> ProfileRecord:
    d = orjson.loads(b)
    return ProfileRecord(d["kind"], d["key"], d["profiler_id"], [tuple(f) for f in d["frames"]],
                         [tuple(s) for s in d["stacks"]], [tuple(s) for s in d["samples"]],
                         {int(k): v for k, v in d["thread_names"].items()}, d["transaction_ids"])


def _dumps(obj) -> str:
    """JSON text of ``obj`` (orjson: ~10x the standard library's speed on the ingest path); the standard library
    for what orjson refuses (integers past 64 bits); anything else unserialisable as its ``str``."""
    try:
        return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(obj, default=str)


def _rate(p: ProfileRecord) -> float:
    """A profile's sampling rate (samples/s): measured, or the Python SDK's default."""
    return p.hz() or SENTRY_PYTHON_HZ


def _create_run(conn: sqlite3.Connection, tx: TransactionRecord, project_id: str | None, hz: float = 0.0) -> str:
    """A new run for ``tx``; ``hz``: the sampling rate of the profile that comes with it (0: none yet)."""
    rid = _run_id(conn, tx)
    t0 = tx.start_ns
    env = {"source": "sentry", "project": project_id, **tx.meta}
    settings = {"source": "sentry", "transaction": tx.name, "profiles_hz": hz}
    status = "ok" if tx.status in (None, "ok") else "error"
    conn.execute(
        "INSERT INTO runs (id, command, cwd, host, pid, status, exit_code, error, start_ns, end_ns, anchor_mono_ns,"
        " anchor_wall_ns, env, settings, unresolved, created_wall_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (rid, _dumps([tx.name]), "", str(tx.meta.get("server_name") or ""), 0, status, None,
         tx.status if status == "error" else None, 0, tx.end_ns - t0, 0, t0, _dumps(env), _dumps(settings),
         "{}", t0))
    # span ids: 1 for the transaction, then in start order; Sentry's hex ids kept in attrs
    ids = {tx.span_id: 1}
    order = sorted(tx.spans, key=lambda s: (s[4], -s[5]))
    for k, s in enumerate(order):
        ids.setdefault(s[0], k + 2)
    steps = steps_from_names([(s[0], s[1], s[2], s[4], s[6]) for s in order])
    rows = [(rid, 1, None, tx.name, "transaction", 0, tx.end_ns - t0, tx.thread_id,
             tx.status if status == "error" else None,
             _dumps({"sentry.span_id": tx.span_id, "sentry.op": tx.op} if tx.op else {"sentry.span_id": tx.span_id}))]
    spans = []
    for s in order:
        sid, parent, name, op, s0, s1, tid, err, attrs = s
        if sid in steps:
            attrs = {**attrs, STEP_ATTR: steps[sid]}
        spans.append((ids[sid], ids.get(parent, 1) if parent else 1, name, op, s0 - t0, s1 - t0, tid, err, attrs))
    more, spans = spanblock.split(spans)  # the transaction a row, its spans one block (``store.spanblock``)
    rows += [(rid, *s[:8], _dumps(s[8])) for s in more]
    conn.executemany("INSERT OR REPLACE INTO spans VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    spanblock.insert(conn, rid, spans, dumps=_dumps)
    if tx.thread_names:
        conn.executemany("INSERT OR IGNORE INTO threads VALUES (?,?,?,?)",
                         ((rid, tid, nm, None) for tid, nm in tx.thread_names.items()))
    conn.execute("INSERT INTO ingest_events VALUES (?,?,?,?,?,?)",
                 (tx.event_id, rid, project_id, tx.profiler_id, tx.start_ns, tx.end_ns))
    return rid


def _attach(conn: sqlite3.Connection, run_id: str, anchor_ns: int, p: ProfileRecord,
            window: tuple[int, int] | None, fresh: bool = False) -> int:
    """Add the profile's samples (inside ``window``, wall ns, when given) to a run; returns how many.
    ``fresh``: the run was made in this transaction with its ``profiles_hz`` (no frames, stacks or rate yet)."""
    samples = p.samples
    if window is not None:
        lo, hi = window
        samples = [s for s in samples if lo <= s[0] <= hi]
    if not samples:
        return 0
    frame_idx: dict = {} if fresh else {tuple(f): k for k, f in enumerate(profileblock.frames(conn, run_id))}
    stack_idx: dict = {} if fresh else {t: k for k, t in enumerate(profileblock.stacks(conn, run_id))}
    first_frame, first_stack = len(frame_idx), len(stack_idx)
    new_frames, new_stacks = [], []
    used = {i for k in {s[2] for s in samples} for i in p.stacks[k]}
    fstr: list[str] = [""] * len(p.frames)  # profile frame -> the run's frame index, as text for stack keys
    for i in sorted(used):
        f = tuple(p.frames[i])
        j = frame_idx.get(f)
        if j is None:
            j = frame_idx[f] = len(frame_idx)
            new_frames.append(f)
        fstr[i] = str(j)
    smap: dict[int, int] = {}

    def stack(k: int) -> int:
        j = smap.get(k)
        if j is None:
            key = ",".join(map(fstr.__getitem__, p.stacks[k]))  # in C
            j = stack_idx.get(key)
            if j is None:
                j = stack_idx[key] = len(stack_idx)
                new_stacks.append(key)
            smap[k] = j
        return j

    for k in {s[2] for s in samples}:
        stack(k)
    rows = [(t - anchor_ns, tid, smap[k]) for t, tid, k in samples]
    # one block each (``store.profileblock``): ~0.03 ms where a row each took ~0.24 ms an envelope
    profileblock.insert(conn, run_id, "frames", first_frame, new_frames, dumps=orjson.dumps)
    profileblock.insert(conn, run_id, "stacks", first_stack, new_stacks, dumps=orjson.dumps)
    sampleblock.insert(conn, run_id, rows)
    if p.thread_names:
        conn.executemany("INSERT OR IGNORE INTO threads VALUES (?,?,?,?)",
                         ((run_id, tid, nm, None) for tid, nm in p.thread_names.items()))
    if fresh:
        return len(rows)
    hz = _rate(p)
    row = conn.execute("SELECT settings FROM runs WHERE id = ?", (run_id,)).fetchone()
    settings = json.loads(row[0] or "{}")
    if not settings.get("profiles_hz"):
        settings["profiles_hz"] = hz
        conn.execute("UPDATE runs SET settings = ? WHERE id = ?", (_dumps(settings), run_id))
    return len(rows)


def apply(conn: sqlite3.Connection, b: Batch, project_id: str | None) -> dict:
    """Store one envelope's records (the caller holds the transaction). Returns what was done:
    ``{"runs": [run ids], "samples": n, "duplicates": n, "pending": n}``."""
    out = {"runs": [], "samples": 0, "duplicates": 0, "pending": 0}
    stored: dict[str, int] = {}
    by_event = {p.key: p for p in b.profiles}
    for tx in b.transactions:
        if conn.execute("SELECT 1 FROM ingest_events WHERE event_id = ?", (tx.event_id,)).fetchone():
            out["duplicates"] += 1
            continue
        p = by_event.pop(tx.event_id, None)
        rid = _create_run(conn, tx, project_id, _rate(p) if p is not None and p.samples else 0.0)
        out["runs"].append(rid)
        stored["transaction"] = stored.get("transaction", 0) + 1
        window = (tx.start_ns, tx.end_ns)
        if p is not None:
            out["samples"] += _attach(conn, rid, tx.start_ns, p, None, fresh=True)
            stored["profile"] = stored.get("profile", 0) + 1
        for (blob,) in conn.execute("SELECT body FROM ingest_pending WHERE event_id = ?", (tx.event_id,)).fetchall():
            out["samples"] += _attach(conn, rid, tx.start_ns, _record_from_blob(blob), None)
        conn.execute("DELETE FROM ingest_pending WHERE event_id = ?", (tx.event_id,))
        if tx.profiler_id:
            for (blob,) in conn.execute("SELECT body FROM ingest_chunks WHERE profiler_id = ? AND start_wall_ns <= ? "
                                        "AND end_wall_ns >= ?", (tx.profiler_id, tx.end_ns, tx.start_ns)).fetchall():
                out["samples"] += _attach(conn, rid, tx.start_ns, _record_from_blob(blob), window)
    for p in by_event.values():  # v1 profiles whose transaction came in another envelope
        row = conn.execute("SELECT run_id, start_wall_ns FROM ingest_events WHERE event_id = ?", (p.key,)).fetchone()
        if row is None:
            conn.execute("INSERT INTO ingest_pending VALUES (?,?,?)", (p.key, _record_to_blob(p), time.time_ns()))
            out["pending"] += 1
        elif sampleblock.any_for(conn, row[0]):
            out["duplicates"] += 1
            continue
        else:
            out["samples"] += _attach(conn, row[0], row[1], p, None)
        stored["profile"] = stored.get("profile", 0) + 1
    for c in b.chunks:
        if not c.samples:
            continue
        if conn.execute("SELECT 1 FROM ingest_chunks WHERE chunk_id = ?", (c.key,)).fetchone():
            out["duplicates"] += 1
            continue
        conn.execute("INSERT INTO ingest_chunks VALUES (?,?,?,?,?,?)",
                     (c.key, c.profiler_id, c.start_ns, c.end_ns, _record_to_blob(c), time.time_ns()))
        stored["profile_chunk"] = stored.get("profile_chunk", 0) + 1
        for rid, start, end in conn.execute("SELECT run_id, start_wall_ns, end_wall_ns FROM ingest_events "
                                            "WHERE profiler_id = ? AND start_wall_ns <= ? AND end_wall_ns >= ?",
                                            (c.profiler_id, c.end_ns, c.start_ns)).fetchall():
            out["samples"] += _attach(conn, rid, start, c, (start, end))
    conn.executemany(
        "INSERT INTO ingest_counts VALUES (?, ?, ?) ON CONFLICT(item_type) DO UPDATE SET "
        "received = received + excluded.received, stored = stored + excluded.stored",
        [(t, n, stored.get(t, 0)) for t, n in b.counts.items()])
    return out


KEEP_NS = 24 * 3600 * 10**9


def prune(conn: sqlite3.Connection, now_wall_ns: int, keep_ns: int = KEEP_NS) -> int:
    """Forget profile chunks, and v1 profiles waiting for their transaction, received more than ``keep_ns``
    (default a day) before ``now_wall_ns`` (the server's clock, not the samples': old data sent today
    is kept). Returns how many rows went."""
    cut = now_wall_ns - keep_ns
    n = conn.execute("DELETE FROM ingest_chunks WHERE received_wall_ns < ?", (cut,)).rowcount
    return n + conn.execute("DELETE FROM ingest_pending WHERE received_wall_ns < ?", (cut,)).rowcount
