"""Write a validated envelope (``sentry.Batch``) into the store as stepscope runs, in the caller's SQLite
transaction (so an envelope is stored whole or not at all).

One transaction event becomes one run (traces, OTLP's and the SDK's streamed spans, are ``apply_trace``'s: one run per
trace and resource, a job's resources joined under one top run with each host's clock offset: ``clock_offsets``): its clock is the transaction's (t = wall ns - the transaction's
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

from ...store import profileblock, sampleblock, spanblock
from ...store.schema import INGEST as SCHEMA  # the layout lives in store/schema.py
from .steps import steps_from_names
from ...core.steprules import STEP_ATTR
from .otlp_decode import resource_key
from .sentry import SENTRY_PYTHON_HZ, Batch, ProfileRecord, TransactionRecord



def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the ingest tables (``SCHEMA``) when missing."""
    conn.executescript(SCHEMA)


def _run_id(conn: sqlite3.Connection, start_ns: int, key: str) -> str:
    """A new run id: the start (local time) and the shortest prefix of ``key`` (hex: an event or trace id) that is
    free."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(start_ns / 1e9))
    for k in (8, 16, 32):
        rid = f"{stamp}-{key[:k]}"
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone() is None:
            return rid
    return f"{stamp}-{key}-{time.time_ns()}"


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
    rid = _run_id(conn, tx.start_ns, tx.event_id)
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
    for rec in b.traces:  # OTLP requests, the SDK's streamed spans
        rid, n, dup = apply_trace(conn, rec, project_id)
        if n and rid not in out["runs"]:
            out["runs"].append(rid)
        out["duplicates"] += dup
        kind = "otlp_span" if rec.source == "otlp" else "span"
        stored[kind] = stored.get(kind, 0) + (n if kind == "otlp_span" else 0)
    if b.traces and "span" in b.counts:  # (span items: counted by item, as the envelope's other items)
        stored["span"] = b.counts["span"]
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


# -- traces: OTLP requests and the Sentry SDK's streamed spans (``ingest.otlp_decode.TraceRecord``) -------------------------

#: resource attributes that name a job: its resources are one run (the first key present wins)
JOB_KEYS = ("stepscope.job.id", "TORCHELASTIC_RUN_ID", "stepscope.run.id")
_IN_CHUNK = 500


def job_of(resource: dict, project_id: str | None) -> str | None:
    """The job a resource belongs to (``JOB_KEYS``: a ``--job`` id or torchelastic's run id; a stepscope run's own
    id joins the processes of one exported run), scoped to the project; None for a resource of its own."""
    for k in JOB_KEYS:
        v = resource.get(k)
        if v not in (None, ""):
            return f"{project_id or ''}:{'run' if k == 'stepscope.run.id' else 'job'}:{v}"
    return None


def _facts(rec, host: str) -> dict:
    """A trace's process facts (``Run.process``): the resource's ``stepscope.*`` ints without the prefix (rank,
    local_rank, world_size), its parent pid, host and service, and how it came."""
    r = rec.resource
    out: dict = {"how": rec.source, "host": host}
    if isinstance(r.get("process.parent_pid"), int):
        out["ppid"] = r["process.parent_pid"]
    for k in ("rank", "local_rank", "world_size"):
        if isinstance(r.get(f"stepscope.{k}"), int):
            out[k] = r[f"stepscope.{k}"]
    if r.get("service.name"):
        out["service"] = str(r["service.name"])[:200]
    return out


def service_of(resource: dict) -> str | None:
    """The resource's ``service.name`` as a run is named by it (what users look for in ``stepscope runs``); None
    when it has none, or only the SDK's default (``unknown_service``, ``unknown_service:node``)."""
    v = resource.get("service.name")
    if not isinstance(v, str) or not v.strip() or v.startswith("unknown_service"):
        return None
    return v[:200]


def _command(rec) -> list[str]:
    r = rec.resource
    args = r.get("process.command_args")
    if isinstance(args, list) and args:
        return [str(a) for a in args]
    if isinstance(r.get("process.command_line"), str) and r["process.command_line"]:
        return r["process.command_line"].split()
    return [str(r.get("service.name") or "otlp")]


def _new_trace_run(conn: sqlite3.Connection, rec, project_id: str | None, job: str | None, tkey: str,
                   t0: int) -> tuple[str, int]:
    """The run of a trace's first spans (a process run of its job's top run, made with the first of the job); returns
    ``(run id, the wall ns its clock counts from)``."""
    r = rec.resource
    host = str(r.get("host.name") or "")[:200]
    pid = r.get("process.pid") if isinstance(r.get("process.pid"), int) else 0
    env = {"source": rec.source, "project": project_id, "resource": r, "trace_id": rec.trace_id}
    settings = {"source": rec.source, "profiles_hz": 0.0}
    cols = ("INSERT INTO runs (id, command, cwd, host, pid, status, exit_code, error, start_ns, end_ns, anchor_mono_ns,"
            " anchor_wall_ns, env, settings, unresolved, created_wall_ns, parent_run, process) VALUES "
            "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
    top = anchor = None
    if job is not None:
        row = conn.execute("SELECT run_id, anchor_wall_ns FROM ingest_jobs WHERE job = ?", (job,)).fetchone()
        if row is None:  # the job's top run: a run of its own that the first host's clock counts for
            top, anchor = _run_id(conn, t0, "job" + resource_key({"job": job})), t0
            conn.execute(cols, (top, _dumps([str(r.get("service.name") or job.split(":", 2)[2])]), "", host, 0, "ok",
                                None, None, 0, 0, 0, t0, _dumps({**env, "job": job}), _dumps(settings), "{}", t0, None,
                                None))
            conn.execute("INSERT INTO ingest_jobs VALUES (?,?,?,?)", (job, top, host, t0))
        else:
            top, anchor = row
    anchor = t0 if anchor is None else anchor
    rid = _run_id(conn, t0, rec.trace_id + rec.resource_key)
    command = _command(rec) if job else [service_of(r) or rec.source]
    conn.execute(cols, (rid, _dumps(command), "", host, pid, "ok", None, None, t0 - anchor,
                        t0 - anchor, 0, anchor, _dumps(env), _dumps(settings), "{}", t0, top,
                        _dumps(_facts(rec, host)) if job else None))
    conn.execute("INSERT INTO ingest_trace_runs VALUES (?,?,?,?,?)", (tkey, rec.resource_key, rid, 1, job))
    return rid, anchor


def _known_ids(conn: sqlite3.Connection, rid: str, ids: list[int]) -> dict[int, tuple[int, int]]:
    """otel span id -> (local id, stored) for those of ``ids`` the run has seen (as a span or as a parent)."""
    out: dict[int, tuple[int, int]] = {}
    for lo in range(0, len(ids), _IN_CHUNK):
        part = ids[lo:lo + _IN_CHUNK]
        out.update((o, (loc, st)) for o, loc, st in conn.execute(
            f"SELECT otel_id, local_id, stored FROM ingest_trace_spans WHERE run_id = ? AND otel_id IN "
            f"({','.join('?' * len(part))})", (rid, *part)))
    return out


def apply_trace(conn: sqlite3.Connection, rec, project_id: str | None) -> tuple[str, int, int]:
    """Store one ``TraceRecord`` in its run (one per trace and resource; a job's resource: one for all its traces;
    made by its first spans; later requests add spans, ids kept through
    ``ingest_trace_spans``, so a span sent again is stored once and a parent may come after its children). Spans are
    on the run's clock (wall ns - its anchor); a job's process run keeps its own host's clock: ``store.jobjoin``
    moves it by the host's estimated offset (``clock_offsets``). Returns ``(run id, spans stored, duplicates)``."""
    job = job_of(rec.resource, project_id)
    tkey = rec.trace_id if job is None else "*"  # (a job's process: one run for all its traces)
    row = conn.execute("SELECT run_id, next_id FROM ingest_trace_runs WHERE trace_id = ? AND resource = ?",
                       (tkey, rec.resource_key)).fetchone()
    if row is None:
        rid, anchor = _new_trace_run(conn, rec, project_id, job, tkey, min(s[4] for s in rec.spans))
        next_id, known = 1, {}
    else:
        rid, next_id = row
        anchor = conn.execute("SELECT anchor_wall_ns FROM runs WHERE id = ?", (rid,)).fetchone()[0]
        known = _known_ids(conn, rid, list({x for s in rec.spans for x in (s[0], s[1]) if x is not None}))
    spans, dup, seen = [], 0, set()
    for s in rec.spans:
        if known.get(s[0], (0, 0))[1] or s[0] in seen:
            dup += 1
            continue
        seen.add(s[0])
        for x in (s[0], s[1]):
            if x is not None and x not in known:
                known[x] = (next_id, 0)
                next_id += 1
        spans.append(s)
    if not spans:
        return rid, 0, dup
    conn.executemany("INSERT OR REPLACE INTO ingest_trace_spans VALUES (?,?,?,?)",
                     [(rid, x, known[x][0], 1 if x in seen else known[x][1]) for x in known if x in seen or
                      known[x][1] == 0])
    conn.execute("UPDATE ingest_trace_runs SET next_id = ? WHERE run_id = ?", (next_id, rid))
    # diffusion.step from the names (pipeline __call__, scheduler step, denoiser forward; or code.function.name)
    steps = steps_from_names([(s[0], s[1], (s[8] or {}).get("code.function.name") or s[2], s[4], s[6]) for s in spans
                              if STEP_ATTR not in (s[8] or {})])
    rows, names = [], {}
    for sid, parent, name, op, s0, s1, tid, err, attrs, tname in spans:
        if sid in steps:
            attrs = {**(attrs or {}), STEP_ATTR: steps[sid]}
        rows.append((known[sid][0], None if parent is None else known[parent][0], name, op, s0 - anchor, s1 - anchor,
                     tid, err, attrs))
        if tname:
            names.setdefault(tid, tname)
    spanblock.insert(conn, rid, rows, dumps=_dumps)
    if names:
        conn.executemany("INSERT OR IGNORE INTO threads VALUES (?,?,?,?)", ((rid, t, n, None) for t, n in names.items()))
    lo, hi = min(r[4] for r in rows), max(r[5] for r in rows)
    conn.execute("UPDATE runs SET start_ns = min(start_ns, ?), end_ns = max(end_ns, ?) WHERE id = ?", (lo, hi, rid))
    roots = [s for s in spans if s[1] is None]
    if roots and job is None and not service_of(rec.resource):  # the trace's root names the run (as a transaction's
        conn.execute("UPDATE runs SET command = ? WHERE id = ?", (_dumps([roots[0][2]]), rid))  # name does)
    failed = next((s for s in roots if s[7]), None)
    if failed is not None:  # the run's error: the root's type and message ("ValueError: bad input")
        message = (failed[8] or {}).get("exception.message")
        conn.execute("UPDATE runs SET status = 'error', error = ? WHERE id = ?",
                     (f"{failed[7]}: {message}" if message else failed[7], rid))
    if job is not None:
        _note_collectives(conn, job, rid, str(rec.resource.get("host.name") or ""), spans)
        clock_offsets(conn, job)
    return rid, len(rows), dup


def _note_collectives(conn: sqlite3.Connection, job: str, rid: str, host: str, spans: list) -> None:
    """The ends (wall ns, the host's clock) of the collectives among ``spans`` (op "collective"), numbered per name in
    start order after those the run already has: the k-th all_reduce of every rank is one collective."""
    coll = sorted((s for s in spans if s[3] == "collective"), key=lambda s: s[4])
    seqs: dict[str, int] = {}
    rows = []
    for s in coll:
        if s[2] not in seqs:
            seqs[s[2]] = conn.execute("SELECT count(*) FROM ingest_collectives WHERE run_id = ? AND name = ?",
                                      (rid, s[2])).fetchone()[0]
        rows.append((job, rid, host, s[2], seqs[s[2]], s[5]))
        seqs[s[2]] += 1
    conn.executemany("INSERT OR IGNORE INTO ingest_collectives VALUES (?,?,?,?,?,?)", rows)


def clock_offsets(conn: sqlite3.Connection, job: str) -> None:
    """Estimate each host's wall-clock offset against the job's first host and store it with its basis in every
    process run's facts (``clock_offset_ns``, ``clock_basis``; ``store.jobjoin`` applies it): the ranks of a job
    leave a collective together (an all_reduce ends when the last rank enters it), so the k-th call of one collective
    ends at one instant on every host; the offset is the median of (this host's end - the first host's end) over the
    collectives both recorded. Without a shared collective the offset is 0, "not estimated (no shared collectives)".
    The top run's start and end follow (its parts on the first host's clock)."""
    top, ref = conn.execute("SELECT run_id, host FROM ingest_jobs WHERE job = ?", (job,)).fetchone()
    parts = conn.execute("SELECT id, host, process, start_ns, end_ns FROM runs WHERE parent_run = ?", (top,)).fetchall()
    offsets: dict[str, tuple[int, str]] = {}
    lo, hi = None, None
    for rid, host, facts, s0, s1 in parts:
        if host not in offsets:
            if host == ref:
                offsets[host] = (0, "the job's clock (its first host)")
            else:
                pairs = conn.execute(
                    "SELECT a.name, a.seq, b.end_wall_ns - a.end_wall_ns FROM ingest_collectives a JOIN "
                    "ingest_collectives b ON b.job = a.job AND b.name = a.name AND b.seq = a.seq WHERE a.job = ? AND "
                    "a.host = ? AND b.host = ?", (job, ref, host)).fetchall()
                d = sorted(p[2] for p in pairs)  # (every rank of each host: several pairs a collective)
                n = len({p[:2] for p in pairs})
                offsets[host] = (d[len(d) // 2] if len(d) % 2 else (d[len(d) // 2 - 1] + d[len(d) // 2]) // 2,
                                 f"median of {n} shared collective ends against {ref or '?'}") if d else \
                    (0, "not estimated (no shared collectives)")
        off, basis = offsets[host]
        f = json.loads(facts or "{}")
        if f.get("clock_offset_ns") != off or f.get("clock_basis") != basis:
            f["clock_offset_ns"], f["clock_basis"] = off, basis
            conn.execute("UPDATE runs SET process = ? WHERE id = ?", (_dumps(f), rid))
        lo = s0 - off if lo is None else min(lo, s0 - off)
        hi = s1 - off if hi is None else max(hi, s1 - off)
    if lo is not None:
        conn.execute("UPDATE runs SET start_ns = ?, end_ns = ? WHERE id = ?", (lo, hi, top))
