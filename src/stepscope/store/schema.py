"""The store's SQLite layout and its version: what opening a ``runs.db`` checks, creates and migrates
(stdlib only: the recording process opens stores too).

``meta.format_version`` holds the schema version:

- **1**: stepscope before versioned opening. Stores of that time lack, depending on their age,
  ``threads.native_id``, the ``os_threads`` table and ``ingest_chunks.received_wall_ns``.
- **2**: samples without ``wall_ns``/``cpu_ns`` (their weight was the gap to the thread's previous sample).
- **3**: each sample carries the wall time it stands
  for and the CPU time its thread used in it (``stepscope.record.sampling.sampler``); NULL in samples of older
  runs and of ingested profiles, which are weighted as before. The ``memory`` table (the memory lane:
  ``record.memory.history``) came later within version 3: a store without it gets it on opening (an additive
  table that stepscopes before it ignore, so the version stays).
- **4**: every table below with every column (``SCHEMA_VERSION``): spans other than transactions are written
  as blocks of binary columns (``span_blocks``, layout in ``store.spanblock``) instead of a row each, and samples
  as one block per flush or ingested profile (``sample_blocks``, ``store.sampleblock``). A store of version 3 or
  less is migrated by adding the tables; its spans and samples stay rows, which readers still read. A
  stepscope of version 3 refuses a version-4 store (it would not see the spans in blocks).
- **5**: a run's frames and stacks may also be blocks (``profile_blocks``, layout in ``store.profileblock``): the
  ingest writes an ingested profile's frames and stacks as one row each. A store of version 4 is migrated by adding
  the table; a stepscope of version 4 refuses a version-5 store (it would not see those frames and stacks).
- **6**: a run may have process runs (``runs.parent_run``: the run whose program started them, directly or further
  down; ``runs.process``: JSON with ``ppid`` and, for a torch.distributed rank, ``rank``, ``local_rank``,
  ``world_size``...): every Python process of a job is recorded as a run of its own, read together with its top run
  (``store.reader.load_run``). A store of version 5 is migrated by adding the columns; a stepscope of version 5
  refuses a version-6 store (it would list each process as a run of its own).

Opening a store: an empty file (or none) gets the core tables and the version; an older version is
migrated forward in one transaction (missing tables and nullable columns added); a newer version, a file
that is not SQLite, an SQLite file of another program, a table lacking a column that cannot be added,
and a damaged file are refused with ``SchemaError`` naming the file and the problem, before anything is
written to it. Tables of ``serve`` and ``bench`` are made on first use (``KEYS``, ``INGEST``, ``BENCH``)
and migrated like the others when present.

The tables: ``meta`` (the version), ``runs``; ``spans`` (transactions, provisional rows of spans still open at a flush, marked
``attrs["stepscope.open"]`` and deleted when the span's block entry is written, so a SIGKILLed run keeps the span
it died in; every span of a store older than 4), ``span_blocks``, ``sample_blocks``, ``frames``, ``stacks``,
``profile_blocks``, ``samples`` (older rows), ``threads``, ``os_threads``, ``memory`` (the memory lane: bytes, NULL where not read);
for ``serve``: ``project_keys``, ``ingest_events``, ``ingest_chunks``, ``ingest_pending``, ``ingest_counts``,
``ingest_spool`` (acknowledged envelopes not yet runs, and failed ones with their error), ``ingest_trace_runs``,
``ingest_trace_spans``, ``ingest_jobs``, ``ingest_collectives``; for ``bench``: ``bench``, ``bench_runs``. Beside
``runs.db``: ``runs/<run id>/`` (a run's files: ``Store.run_file``) and ``path/<key>/`` (the folders ``stepscope
run`` puts on ``PYTHONPATH`` for an interpreter without this stepscope installed: ``record.processes.path_folder``).
"""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

SCHEMA_VERSION = 6

CORE = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
  id TEXT PRIMARY KEY, command TEXT NOT NULL, cwd TEXT, host TEXT, pid INTEGER,
  status TEXT NOT NULL, exit_code INTEGER, error TEXT,
  start_ns INTEGER, end_ns INTEGER, anchor_mono_ns INTEGER, anchor_wall_ns INTEGER,
  env TEXT, settings TEXT, unresolved TEXT, created_wall_ns INTEGER, parent_run TEXT, process TEXT
);
CREATE TABLE IF NOT EXISTS spans (
  run_id TEXT NOT NULL, span_id INTEGER NOT NULL, parent_id INTEGER, name TEXT NOT NULL, op TEXT,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, thread_id INTEGER, error_type TEXT, attrs TEXT,
  PRIMARY KEY (run_id, span_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS span_blocks (run_id TEXT NOT NULL, n INTEGER NOT NULL, first_id INTEGER,
  body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS span_blocks_run ON span_blocks (run_id);
CREATE TABLE IF NOT EXISTS sample_blocks (run_id TEXT NOT NULL, n INTEGER NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS sample_blocks_run ON sample_blocks (run_id);
CREATE TABLE IF NOT EXISTS frames (
  run_id TEXT NOT NULL, idx INTEGER NOT NULL, function TEXT, module TEXT, file TEXT, line INTEGER,
  PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stacks (
  run_id TEXT NOT NULL, idx INTEGER NOT NULL, frames TEXT NOT NULL,
  PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS profile_blocks (run_id TEXT NOT NULL, kind TEXT NOT NULL, first_idx INTEGER NOT NULL,
  body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS profile_blocks_run ON profile_blocks (run_id, kind);
CREATE TABLE IF NOT EXISTS samples (run_id TEXT NOT NULL, t_ns INTEGER NOT NULL, thread_id INTEGER, stack INTEGER,
  wall_ns INTEGER, cpu_ns INTEGER);
CREATE INDEX IF NOT EXISTS samples_run ON samples (run_id, t_ns);
CREATE TABLE IF NOT EXISTS threads (run_id TEXT NOT NULL, thread_id INTEGER, name TEXT, native_id INTEGER,
  PRIMARY KEY (run_id, thread_id));
CREATE TABLE IF NOT EXISTS os_threads (run_id TEXT NOT NULL, thread_id INTEGER, native_id INTEGER, since_ns INTEGER);
CREATE TABLE IF NOT EXISTS memory (run_id TEXT NOT NULL, t_ns INTEGER NOT NULL, rss INTEGER, cuda_allocated INTEGER,
  cuda_reserved INTEGER);
CREATE INDEX IF NOT EXISTS memory_run ON memory (run_id, t_ns);
"""

#: indexes on columns that a migration may have just added (made after the columns)
LATE_INDEXES = """
CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_run);
"""

KEYS = """
CREATE TABLE IF NOT EXISTS project_keys (public_key TEXT PRIMARY KEY, project_id TEXT NOT NULL, label TEXT,
  created_wall_ns INTEGER);
"""

INGEST = """
CREATE TABLE IF NOT EXISTS ingest_events (event_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, project_id TEXT,
  profiler_id TEXT, start_wall_ns INTEGER, end_wall_ns INTEGER);
CREATE INDEX IF NOT EXISTS ingest_events_profiler ON ingest_events (profiler_id, start_wall_ns);
CREATE TABLE IF NOT EXISTS ingest_chunks (chunk_id TEXT PRIMARY KEY, profiler_id TEXT NOT NULL,
  start_wall_ns INTEGER, end_wall_ns INTEGER, body BLOB NOT NULL, received_wall_ns INTEGER);
CREATE INDEX IF NOT EXISTS ingest_chunks_profiler ON ingest_chunks (profiler_id, start_wall_ns);
CREATE TABLE IF NOT EXISTS ingest_pending (event_id TEXT NOT NULL, body BLOB NOT NULL, received_wall_ns INTEGER);
CREATE INDEX IF NOT EXISTS ingest_pending_event ON ingest_pending (event_id);
CREATE TABLE IF NOT EXISTS ingest_counts (item_type TEXT PRIMARY KEY, received INTEGER NOT NULL, stored INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ingest_spool (seq INTEGER PRIMARY KEY, body BLOB NOT NULL, received_wall_ns INTEGER,
  error TEXT);
CREATE TABLE IF NOT EXISTS ingest_trace_runs (trace_id TEXT NOT NULL, resource TEXT NOT NULL, run_id TEXT NOT NULL,
  next_id INTEGER NOT NULL, job TEXT, PRIMARY KEY (trace_id, resource)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ingest_trace_spans (run_id TEXT NOT NULL, otel_id INTEGER NOT NULL, local_id INTEGER NOT NULL,
  stored INTEGER NOT NULL, PRIMARY KEY (run_id, otel_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ingest_jobs (job TEXT PRIMARY KEY, run_id TEXT NOT NULL, host TEXT, anchor_wall_ns INTEGER);
CREATE TABLE IF NOT EXISTS ingest_collectives (job TEXT NOT NULL, run_id TEXT NOT NULL, host TEXT, name TEXT NOT NULL,
  seq INTEGER NOT NULL, end_wall_ns INTEGER NOT NULL, PRIMARY KEY (run_id, name, seq)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ingest_collectives_job ON ingest_collectives (job, host);
"""

BENCH = """
CREATE TABLE IF NOT EXISTS bench (id TEXT PRIMARY KEY, created_wall_ns INTEGER, spec TEXT, env TEXT, status TEXT,
  labels TEXT, notes TEXT);
CREATE TABLE IF NOT EXISTS bench_runs (bench_id TEXT NOT NULL, config INTEGER, repeat INTEGER, warmup INTEGER,
  wall_s REAL, steps TEXT, peak_bytes INTEGER, error TEXT);
"""

class SchemaError(Exception):
    """A ``runs.db`` this stepscope cannot use; the message is one line naming the file and the problem."""


@functools.cache
def _columns() -> dict[str, list[tuple[str, str, bool, bool]]]:
    """Every known table -> its columns as ``(name, declared type, NOT NULL, part of the primary key)``."""
    mem = sqlite3.connect(":memory:")
    mem.executescript(CORE + KEYS + INGEST + BENCH)
    tables = [r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    cols = {t: [(r[1], r[2], bool(r[3]), bool(r[5])) for r in mem.execute(f"PRAGMA table_info({t})")] for t in tables}
    mem.close()
    return cols


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


class _Found:
    """What a database holds: its tables (name -> column names) and ``meta.format_version`` (None: none)."""

    def __init__(self, conn: sqlite3.Connection, db: Path) -> None:
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            self.tables = {t: {r[1] for r in conn.execute('PRAGMA table_info("%s")' % t.replace('"', '""'))}
                           for t in names}
            self.version = None
            if "meta" in self.tables and {"key", "value"} <= self.tables["meta"]:
                row = conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
                self.version = None if row is None else row[0]
        except sqlite3.DatabaseError as e:
            raise SchemaError(damaged(db, e)) from None
        own = sorted(t for t in self.tables if not t.startswith("sqlite_"))
        self.empty = not own
        if self.empty:
            return
        if self.version is None:
            shown = ", ".join(own[:6]) + (", ..." if len(own) > 6 else "")
            raise SchemaError(f"{db}: not a stepscope store (an SQLite database with tables {shown})")
        try:
            self.version = int(self.version)
            if self.version < 1:
                raise ValueError
        except (TypeError, ValueError):
            raise SchemaError(f"{db}: not a stepscope store (format_version {self.version!r} in its meta table)") from None
        if self.version > SCHEMA_VERSION:
            raise SchemaError(f"{db}: written by a newer stepscope (schema {self.version}, this one reads up to "
                              f"{SCHEMA_VERSION}); upgrade stepscope, or use another --store")
        self.missing = {}  # table -> columns to add
        for table, cols in _columns().items():
            have = self.tables.get(table)
            if have is None:
                continue
            lack = [c for c in cols if c[0] not in have]
            fixed = [c[0] for c in lack if c[2] or c[3]]  # NOT NULL or key columns cannot be added to old rows
            if fixed:
                raise SchemaError(f"{db}: table {table} has no column {', '.join(fixed)}, which this stepscope cannot "
                                  "add (not a stepscope store, or a damaged one)")
            if lack:
                self.missing[table] = lack
        self.missing_core = [t for t in ("runs", "spans", "span_blocks", "frames", "stacks", "profile_blocks", "samples", "sample_blocks", "threads",
                                            "os_threads", "memory")
                             if t not in self.tables]

    @property
    def current(self) -> bool:
        return not self.empty and self.version == SCHEMA_VERSION and not self.missing and not self.missing_core


def damaged(db: Path | str, e: BaseException) -> str:
    """The one-line message for an SQLite error met while opening or reading ``db``."""
    text = str(e)
    if "not a database" in text:
        return f"{db}: not a stepscope store (not an SQLite database)"
    if "malformed" in text or "corrupt" in text:
        return f"{db}: cannot be read ({text}); the file is damaged or was changed by another program"
    return f"{db}: {text}"


def prepare(conn: sqlite3.Connection, db: Path) -> int:
    """Make ``conn`` (autocommit, on ``db``) a store of ``SCHEMA_VERSION``: create an empty one, migrate an
    older one; returns the version found (0 for a new store). Reads first and writes nothing unless the
    store is one this stepscope knows. Raises SchemaError naming ``db`` and what is wrong."""
    found = _Found(conn, db)
    if found.current:
        return found.version
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.DatabaseError as e:
        raise SchemaError(damaged(db, e)) from None
    try:
        found = _Found(conn, db)  # another process may have created or migrated it meanwhile
        if not found.current:
            for stmt in _statements(CORE):
                conn.execute(stmt)
            for table, cols in ({} if found.empty else found.missing).items():
                for name, decl, _, _ in cols:
                    conn.execute(f'ALTER TABLE "{table}" ADD COLUMN {name} {decl}')
            for stmt in _statements(LATE_INDEXES):
                conn.execute(stmt)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('format_version', ?)", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException as e:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite rolled back already
        if isinstance(e, sqlite3.DatabaseError):
            raise SchemaError(f"{db}: cannot be migrated to schema {SCHEMA_VERSION} ({e})") from None
        raise
    return 0 if found.empty else found.version
