"""SQLite schema and queries for the run store (stdlib only: the recording process writes here).

Layout: ``<store>/runs.db`` (SQLite, WAL journal so readers never block the writer) and
``<store>/runs/<run id>/`` for files that belong to a run (images, device traces): ``run_path`` and
``Store.run_file`` are the one place a run's path is made, from the names below.
Raw records only: flame graphs, step tables and diffs are computed on load (``store.reader.load_run``).
Every SQL statement of stepscope lives in ``store/`` (and the ingest writer, ``serve/ingest/writer.py``,
``serve/ingest/apply.py``): every other module reads through ``Store`` methods and ``store`` functions named for
what they read (``store.reader.load_run``, ``Store.runs_before``, ``Store.recent_runs_for_picker``,
``Store.ingest_stats``, ``Store.spans_named``, ``store.bench.list_benches``...), which raise ``StoreError`` (one line
naming ``runs.db``) when the store cannot be read; analysis, the web UI, the renderers and the CLI never hold a
connection. The first failed write of a recording is kept as one line (``write_error_text``: "store full at
PATH") and the run marked ``incomplete``.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..core.model import MemoryTrack, Profile, Run
from . import sampleblock, schema, spanblock


_HOST = socket.gethostname()
_SQLITE_FULL = 13

#: the folder of the runs' files in a store folder (``run_path``)
RUNS_DIR = "runs"
# files of a run's folder (``Store.run_file(run_id, NAME)``)
#: the torch profiler's trace of the run (Kineto JSON, gzipped: ``record.device.capture``)
DEVICE_TRACE = "device_trace.json.gz"
#: the device's measured matmul peaks, written beside the trace (``record.device.capture``)
DEVICE_PROBE = "device_probe.json"
#: Dynamo's graph breaks and recompiles (``--compile-report``: ``record.device.compile_report``)
COMPILE_REPORT = "compile_report.json"
#: the XLA profiler's capture folder (``plugins/profile/<time>/``: ``record.device.xla_capture``)
XLA_TRACE_DIR = "xla_trace"
#: torch_xla metrics readings of the run (``record.device.xla_capture``)
XLA_METRICS = "xla_metrics.json"
#: the CUDA allocator's snapshot at an out-of-memory error (``--memory-history``: ``record.memory.history.History``)
MEMORY_SNAPSHOT = "memory_snapshot.pickle"
#: the demo's image (``stepscope demo``)
DEMO_IMAGE = "image.png"

#: any SQLite error a store call may raise beyond ``StoreError`` (a failed write: ``write_error_text``)
DbError = sqlite3.Error
#: an SQLite error of a store that opened but is damaged further in (``schema.damaged`` names the file)
DatabaseError = sqlite3.DatabaseError


def run_path(store_path: str | os.PathLike, run_id: str, name: str | None = None) -> Path:
    """The folder of run ``run_id``'s files in the store folder ``store_path``, or the file ``name`` (one of
    the names above) in it; nothing is created. For code that has the store's folder but no ``Store`` (the
    control server inside the program); otherwise ``Store.run_dir``/``Store.run_file``."""
    d = Path(store_path) / RUNS_DIR / run_id
    return d if name is None else d / name


def _json_insert(head: str, n: int) -> str:
    """``head`` + a SELECT of the run id (``?1``) and ``n`` values from each element of the JSON array ``?2``."""
    return head + " SELECT ?1, " + ", ".join(f"json_extract(value, '$[{k}]')" for k in range(n)) + " FROM json_each(?2)"


def write_error_text(e: BaseException, path: str | os.PathLike) -> str:
    """One line for a failed write to the store at ``path``: ``store full at PATH`` or the reason."""
    path = Path(path).resolve()
    if (getattr(e, "sqlite_errorcode", None) == _SQLITE_FULL or getattr(e, "errno", None) == errno.ENOSPC
            or "disk is full" in str(e)):
        return f"store full at {path}"
    return f"cannot write to store at {path}: {e}"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs here (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class StoreError(Exception):
    """A store that cannot be opened or read, or a run id that matches no run (message names which)."""


def default_store_path() -> Path:
    """``$STEPSCOPE_STORE`` or ``./.stepscope``."""
    return Path(os.environ.get("STEPSCOPE_STORE") or ".stepscope")


def job_unresolved(top: Run, others: list[Run]) -> dict[str, str]:
    """The names a job could not trace: a name is "not traced" only if no process of the job traced it (the top
    run's reason, with the number of processes that tried); ``others``: the job's process runs."""
    runs = [top, *[r for r in others if r.status != "failed"]]
    out: dict[str, str] = {}
    for name, why in top.unresolved.items():
        if all(name in r.unresolved for r in runs):
            out[name] = why if len(runs) == 1 else f"{why} (nor in any of the job's {len(runs)} processes)"
    return out


class Store:
    """One store folder. Each instance holds one connection; use one instance per thread.

    Opening creates a new store, migrates one of an older schema (``schema.prepare``), and raises
    StoreError (one line naming ``runs.db``) for a store of a newer stepscope, another program's file, a
    damaged one, or, with ``create=False``, none."""

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        db = self.path / "runs.db"
        if not db.exists() and not create:
            raise StoreError(f"no stepscope store at {self.path} (run `stepscope run` or `stepscope demo` first)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(db, timeout=30, check_same_thread=False, isolation_level=None)
            self._json: bool | None = None  # SQLite's JSON functions (``append(one_statement=True)``), once known
            self._provisional: dict[str, set[int]] = {}  # run id -> ids of the open spans written as rows
            self._spool: bool | None = None  # the store has serve's ``ingest_spool`` (``settle_ingest``), once known
        except (sqlite3.Error, OSError) as e:
            raise StoreError(f"cannot open store {db}: {e}") from None
        try:
            # refuses a foreign, newer or damaged file before writing to it. (No reading of the file
            # here by other means: closing another descriptor of it would drop this process's SQLite locks.)
            schema.prepare(self.conn, db)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
        except (schema.SchemaError, sqlite3.Error) as e:
            self.conn.close()
            raise StoreError(str(e) if isinstance(e, schema.SchemaError) else schema.damaged(db, e)) from None

    def close(self) -> None:
        self.conn.close()

    def run_dir(self, run_id: str) -> Path:
        """The folder for a run's files (created on demand)."""
        d = run_path(self.path, run_id)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def run_file(self, run_id: str, name: str, create: bool = False) -> Path:
        """The file ``name`` (``DEVICE_TRACE``, ``DEVICE_PROBE``, ``COMPILE_REPORT``, ``XLA_TRACE_DIR``,
        ``XLA_METRICS``, ``MEMORY_SNAPSHOT``, ``DEMO_IMAGE``) of run ``run_id``'s folder; with ``create`` the
        folder is made (for a writer), else nothing is (the file may not exist)."""
        return (self.run_dir(run_id) if create else run_path(self.path, run_id)) / name

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """An SQLite error met inside becomes ``StoreError``: one line naming ``runs.db``."""
        try:
            yield
        except sqlite3.Error as e:
            raise StoreError(schema.damaged(self.path / "runs.db", e)) from None

    # -- writing ---------------------------------------------------------------------------------
    def create_run(self, run: Run, created_wall_ns: int) -> None:
        self.conn.execute(
            "INSERT INTO runs (id, command, cwd, host, pid, status, start_ns, anchor_mono_ns, anchor_wall_ns,"
            " env, settings, unresolved, created_wall_ns, parent_run, process) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run.id, json.dumps(run.command), run.cwd, run.host, run.pid, run.status, run.start_ns,
             run.anchor_mono_ns, run.anchor_wall_ns, json.dumps(run.env), json.dumps(run.settings),
             json.dumps(run.unresolved), created_wall_ns, run.parent_run,
             json.dumps(run.process) if run.process else None),
        )

    def update_run(self, run_id: str, **fields) -> None:
        """Set columns of a run; dict/list values are stored as JSON."""
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        vals = [json.dumps(v) if isinstance(v, (dict, list)) else v for v in fields.values()]
        self.conn.execute(f"UPDATE runs SET {cols} WHERE id = ?", (*vals, run_id))

    def append(self, run_id: str, *, spans: Iterable[tuple] = (), frames: list[tuple] = (), frame_base: int = 0,
               stacks: list[tuple] = (), stack_base: int = 0, samples: Iterable[tuple] = (),
               threads: dict[int, tuple[str, int | None]] | None = None, os_threads: list[tuple] = (),
               memory: Iterable[tuple] = (), open_spans: Iterable[tuple] = (), drop_open: bool = False,
               one_statement: bool = False, blocks: Iterable[tuple[bytes, int, int]] = ()) -> None:
        """Append recorded data in one transaction.

        ``spans``: tuples as in ``stepscope.record.spans.buffer.SPAN_FIELDS``; ``frames``/``stacks``: new table
        entries whose indices start at ``frame_base``/``stack_base``; ``samples``: ``(t_ns, thread_id, stack,
        wall_ns, cpu_ns)`` (``wall_ns``/``cpu_ns`` may be left off or None: unknown; ``cpu_ns`` < 0 is stored NULL);
        ``threads``: thread id -> (name, OS thread id); ``os_threads``: ``(thread id, OS thread id, since_ns)``
        each time a thread id is seen on a new OS thread (Python reuses ids). ``memory``: memory samples
        ``(t_ns, rss, cuda_allocated, cuda_reserved)`` in bytes (-1: not read, stored NULL). ``open_spans``: span
        tuples of spans still open (``attrs["stepscope.open"]``), written before ``spans`` and only over rows
        that are provisional themselves (a finished span's row is never replaced by an open one);
        ``drop_open``: delete the run's remaining provisional rows (the program ended normally).

        Spans other than transactions go into ``span_blocks`` (``store.spanblock``: one row per 65,536 spans);
        transactions stay rows of ``spans``. ``blocks``: span blocks already encoded, ``(body, n, first span id)``
        (``record.spans.buffer.take_native_blocks``), written as they are.

        Samples go in as one block (``store.sampleblock``).

        ``one_statement``: memory samples go in as one JSON array (SQLite's ``json_each``)
        instead of a row at a time. Python's sqlite3 lets go of the GIL around every row it steps; a recorder
        thread writing beside a busy pure-Python program then waits for the GIL (the 5 ms switch interval) after
        each row: 200 rows took a second. One statement lets go of it once. (Bulk writes are as fast either way.)
        Ignored where SQLite has no JSON functions.
        """
        c = self.conn
        if one_statement and self._json is None:
            try:
                self._json = c.execute("SELECT json_extract(value, '$[0]') FROM json_each('[[7]]')").fetchone()[0] == 7
            except sqlite3.Error:
                self._json = False
        one = one_statement and self._json
        c.execute("BEGIN")
        try:
            if open_spans:
                c.executemany(
                    "INSERT INTO spans VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (run_id, span_id) DO UPDATE SET "
                    "end_ns = excluded.end_ns, attrs = excluded.attrs WHERE spans.attrs LIKE '%\"stepscope.open\"%'",
                    ((run_id, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], json.dumps(s[8], default=str))
                     for s in open_spans))
                self._provisional.setdefault(run_id, set()).update(s[0] for s in open_spans)
            prov = self._provisional.get(run_id)
            ended: list[int] = []  # (the spans put into blocks now, when provisional rows may wait for them)
            for body, n, first in blocks:
                spanblock.insert_body(c, run_id, body, n, first)
                if prov:
                    ended.extend(spanblock.ids_of(body))
            spans = spans if isinstance(spans, list) else list(spans)
            if spans:
                rows, bulk = spanblock.split(spans)
                if rows:
                    c.executemany("INSERT OR REPLACE INTO spans VALUES (?,?,?,?,?,?,?,?,?,?)",
                                  ((run_id, *s[:8], json.dumps(s[8], default=str) if s[8] else None) for s in rows))
                if bulk:
                    spanblock.insert(c, run_id, bulk)
                    if prov:
                        ended.extend(s[0] for s in bulk)
            if ended:  # open spans written before that have ended now: their block entry replaces the row
                done = prov.intersection(ended)
                if done:
                    c.executemany("DELETE FROM spans WHERE run_id = ? AND span_id = ? AND attrs LIKE "
                                  "'%\"stepscope.open\"%'", ((run_id, x) for x in done))
                    prov -= done
            if frames:
                c.executemany("INSERT OR REPLACE INTO frames VALUES (?,?,?,?,?,?)",
                              ((run_id, frame_base + i, *f) for i, f in enumerate(frames)))
            if stacks:
                c.executemany("INSERT OR REPLACE INTO stacks VALUES (?,?,?)",
                              ((run_id, stack_base + i, ",".join(map(str, s))) for i, s in enumerate(stacks)))
            sampleblock.insert(c, run_id, samples if isinstance(samples, list) else list(samples))
            if os_threads:
                c.executemany("INSERT INTO os_threads VALUES (?,?,?,?)", ((run_id, *x) for x in os_threads))
            if memory:
                rows = [(m[0], m[1] if m[1] >= 0 else None, m[2] if m[2] >= 0 else None, m[3] if m[3] >= 0 else None)
                        for m in memory]
                if one:
                    c.execute(_json_insert("INSERT INTO memory", 4), (run_id, json.dumps(rows)))
                else:
                    c.executemany("INSERT INTO memory VALUES (?,?,?,?,?)", ((run_id, *r) for r in rows))
            if drop_open:
                self._provisional.pop(run_id, None)
                c.execute("DELETE FROM spans WHERE run_id = ? AND attrs LIKE '%\"stepscope.open\"%'", (run_id,))
            if threads:
                c.executemany("INSERT OR REPLACE INTO threads VALUES (?,?,?,?)",
                              ((run_id, tid, name, native) for tid, (name, native) in threads.items()))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:  # SQLite may have rolled back already (a full disk)
                c.execute("ROLLBACK")
            raise

    def counts(self, run_id: str) -> tuple[int, int]:
        """(spans, samples) stored for a run."""
        c = self.conn
        return spanblock.count(c, run_id), sampleblock.count(c, run_id)

    def last_record_ns(self, run_id: str) -> int | None:
        """The latest clock reading among a run's memory samples and span rows (ns; None: neither): where a run
        that ended without writing its end is taken to have ended."""
        row = self.conn.execute("SELECT max(t) FROM (SELECT max(t_ns) AS t FROM memory WHERE run_id = ? UNION ALL "
                                "SELECT max(end_ns) FROM spans WHERE run_id = ?)", (run_id, run_id)).fetchone()
        return row[0] if row else None

    def delete_run(self, run_id: str) -> None:
        """Delete a run with its files and its process runs."""
        for (child,) in self.conn.execute("SELECT id FROM runs WHERE parent_run = ?", (run_id,)).fetchall():
            self.delete_run(child)
        c = self.conn
        c.execute("BEGIN")
        for table in ("spans", "span_blocks", "frames", "stacks", "profile_blocks", "samples", "sample_blocks", "threads",
                      "os_threads", "memory"):
            c.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        if c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ingest_events'").fetchone():
            c.execute("DELETE FROM ingest_events WHERE run_id = ?", (run_id,))  # a re-sent event is stored anew
        if c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ingest_trace_runs'").fetchone():
            for table in ("ingest_trace_runs", "ingest_trace_spans", "ingest_jobs", "ingest_collectives"):
                c.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))  # (re-sent spans: stored anew)
        c.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        c.execute("COMMIT")
        d = run_path(self.path, run_id)
        if d.exists():
            import shutil

            shutil.rmtree(d, ignore_errors=True)

    # -- reading ---------------------------------------------------------------------------------
    def resolve_id(self, ref: str | None) -> str:
        """A full run id from ``ref``: None or "last" (the newest run), a full id, or a unique prefix.

        Raises StoreError naming the reference when nothing or more than one run matches.
        """
        self.settle_ingest()
        if ref in (None, "", "last", "latest"):
            row = self.conn.execute("SELECT id FROM runs WHERE parent_run IS NULL ORDER BY created_wall_ns DESC, id DESC"
                                    " LIMIT 1").fetchone()
            if row is None:
                raise StoreError(f"no runs in store {self.path}")
            return row[0]
        rows = self.conn.execute("SELECT id FROM runs WHERE id = ? OR id LIKE ? || '%' LIMIT 3", (ref, ref)).fetchall()
        ids = [r[0] for r in rows]
        if ref in ids:
            return ref
        if not ids:
            raise StoreError(f"no run {ref!r} in store {self.path}")
        if len(ids) > 1:
            raise StoreError(f"run id {ref!r} is ambiguous ({', '.join(ids[:2])}, ...)")
        return ids[0]

    def settle_ingest(self, timeout_s: float = 2.0, stall_s: float = 0.5) -> None:
        """Wait (at most ``timeout_s``) until the envelopes that ``stepscope serve`` has acknowledged by now are
        runs: its writer answers once an envelope is committed to ``ingest_spool`` and makes the runs right
        after (``ingest.writer``), so a reader that asks just after a 200 sees the run. Returns at once when
        the spool is empty or the store has none, and after ``stall_s`` without progress (no server running:
        what the spool holds becomes runs when it starts next); envelopes that failed to become runs
        (``error``) are not waited for."""
        if self._spool is None:
            self._spool = bool(self.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ingest_spool'").fetchone())
        if not self._spool:
            return
        first, last = self.conn.execute("SELECT min(seq), max(seq) FROM ingest_spool WHERE error IS NULL").fetchone()
        q = "SELECT min(seq) FROM ingest_spool WHERE error IS NULL AND seq <= ?"
        now = time.monotonic()
        deadline, moved = now + timeout_s, now
        while first is not None and now < deadline and now - moved < stall_s:
            time.sleep(0.002)
            now = time.monotonic()
            head = self.conn.execute(q, (last,)).fetchone()[0]
            if head != first:
                first, moved = head, now

    def list_runs(self, limit: int | None = None) -> list[Run]:
        self.settle_ingest()
        q = "SELECT * FROM runs WHERE parent_run IS NULL ORDER BY created_wall_ns DESC, id DESC"
        if limit:
            q += f" LIMIT {int(limit)}"
        runs = [self._run(r) for r in self._rows(q)]
        for run in runs:
            procs = self.process_runs(run.id)  # a job: its processes' spans and samples count too
            run.span_count = sum(spanblock.count(self.conn, r.id, transactions=False) for r in [run, *procs])
            run.sample_count = sum(sampleblock.count(self.conn, r.id) for r in [run, *procs])
            if procs:
                run.unresolved = job_unresolved(run, procs)
        return runs

    def process_runs(self, run_id: str) -> list[Run]:
        """The runs of the other processes of run ``run_id``'s job (``Run.parent_run`` = ``run_id``: every Python
        process its program started, directly or further down), in start order; [] for a run of one process."""
        return [self._run(r) for r in self._rows("SELECT * FROM runs WHERE parent_run = ? ORDER BY start_ns, id",
                                                  (run_id,))]

    def get_run(self, run_id: str, as_stored: bool = False) -> Run:
        """A run; a "running" run whose process is gone reads as "lost" unless ``as_stored``."""
        rows = self._rows("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise StoreError(f"no run {run_id!r} in store {self.path}")
        return self._run_row(rows[0]) if as_stored else self._run(rows[0])

    def runs_before(self, run_id: str, limit: int) -> list[tuple[str, list]]:
        """The ``limit`` runs created before run ``run_id`` (same creation time: a smaller id), newest first, as
        ``(id, command)``. Raises StoreError for an unknown run or an unreadable store."""
        with self._reading():
            row = self.conn.execute("SELECT created_wall_ns FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run {run_id!r} in store {self.path}")
            rows = self.conn.execute(
                "SELECT id, command FROM runs WHERE id != ? AND parent_run IS NULL AND (created_wall_ns < ? OR "
                "(created_wall_ns = ? AND id < ?)) "
                "ORDER BY created_wall_ns DESC, id DESC LIMIT ?", (run_id, row[0], row[0], run_id, int(limit))).fetchall()
        return [(r[0], json.loads(r[1] or "[]")) for r in rows]

    def latest_run_of(self, command: list[str], status: str | None = "ok") -> str | None:
        """The id of the newest top run recorded with exactly ``command`` (the pytest plugin's ``["pytest", NODEID]``)
        and, unless ``status`` is None, that status; None when there is none. Raises StoreError for an unreadable
        store."""
        with self._reading():
            row = self.conn.execute(
                "SELECT id FROM runs WHERE parent_run IS NULL AND command = ? AND (? IS NULL OR status = ?) "
                "ORDER BY created_wall_ns DESC, id DESC LIMIT 1", (json.dumps(command), status, status)).fetchone()
        return row[0] if row else None

    def recent_runs_for_picker(self, limit: int) -> list[tuple[str, list, int | None, str]]:
        """The newest ``limit`` runs as ``(id, command, start wall-clock ns, source)`` (source: "run", or the
        env's ``source``: "sentry" for ingested runs), newest first; the envelopes ``stepscope serve`` has
        acknowledged are waited for first (``settle_ingest``). Raises StoreError for an unreadable store."""
        with self._reading():
            self.settle_ingest()
            rows = self.conn.execute(
                "SELECT id, command, anchor_wall_ns + (start_ns - anchor_mono_ns), "
                "coalesce(json_extract(env, '$.source'), 'run') "
                "FROM runs WHERE parent_run IS NULL ORDER BY created_wall_ns DESC, id DESC LIMIT ?", (int(limit),)).fetchall()
        return [(r[0], json.loads(r[1] or "[]"), r[2], r[3]) for r in rows]

    def ingest_stats(self) -> tuple[dict[str, tuple[int, int]], int, int]:
        """``stepscope serve``'s counters: ``({item type: (received, stored)}, waiting, failed)``: waiting, the
        acknowledged envelopes not yet runs (the writer's backlog); failed, those that failed to become runs
        (kept, tried again when the writer starts next). The ingest tables must exist (the writer makes them).
        Raises StoreError for an unreadable store."""
        with self._reading():
            rows = self.conn.execute("SELECT item_type, received, stored FROM ingest_counts").fetchall()
            waiting, failed = self.conn.execute(
                "SELECT count(*) - count(error), count(error) FROM ingest_spool").fetchone()
        return {t: (r, s) for t, r, s in rows}, waiting, failed

    def spans_named(self, run_id: str, match: Callable[[str], bool]) -> list[tuple]:
        """The run's spans whose name ``match`` accepts, as tuples (``SPAN_FIELDS`` order, ``attrs`` a dict or
        None), in no particular order, without building the other spans' (``spanblock.named``). Raises StoreError
        for a damaged block or an unreadable store."""
        with self._reading():
            try:
                return list(spanblock.named(self.conn, run_id, match))
            except spanblock.BlockError as e:
                raise StoreError(f"{self.path / 'runs.db'}: run {run_id}: {e}") from None

    def load_threads(self, run_id: str, profile: Profile) -> None:
        """Fill ``profile``'s thread names, OS thread ids and ``os_threads`` (each Python thread id's OS threads in
        time order: ids are reused) from the store."""
        c = self.conn
        rows = c.execute("SELECT thread_id, name, native_id FROM threads WHERE run_id = ?", (run_id,)).fetchall()
        profile.thread_names = {r[0]: r[1] for r in rows}
        profile.native_ids = {r[0]: r[2] for r in rows if r[2] is not None}
        for tid, native, since in c.execute("SELECT thread_id, native_id, since_ns FROM os_threads WHERE run_id = ? "
                                            "ORDER BY since_ns", (run_id,)):
            profile.os_threads.setdefault(tid, []).append((since, native))

    def load_memory(self, run_id: str) -> MemoryTrack:
        """The run's memory lane (``record.memory.history``): samples in time order (bytes; None where not read)."""
        rows = self.conn.execute("SELECT t_ns, rss, cuda_allocated, cuda_reserved FROM memory WHERE run_id = ? "
                                 "ORDER BY t_ns", (run_id,)).fetchall()
        return MemoryTrack([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])

    def _rows(self, q: str, args: tuple = ()) -> list[sqlite3.Row]:
        cur = self.conn.execute(q, args)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    @staticmethod
    def _run(r: dict) -> Run:
        run = Store._run_row(r)
        if run.status == "running" and run.pid and run.host == _HOST and not _alive(run.pid):
            # its process is gone and nobody wrote its end (stepscope itself was SIGKILLed, say)
            run.status, run.error = "lost", run.error or "the recording process ended without writing the run's end"
        return run

    @staticmethod
    def _run_row(r: dict) -> Run:
        return Run(
            id=r["id"], command=json.loads(r["command"]), cwd=r["cwd"] or "", host=r["host"] or "",
            pid=r["pid"] or 0, status=r["status"], exit_code=r["exit_code"], error=r["error"],
            start_ns=r["start_ns"] or 0, end_ns=r["end_ns"], anchor_mono_ns=r["anchor_mono_ns"] or 0,
            anchor_wall_ns=r["anchor_wall_ns"] or 0, env=json.loads(r["env"] or "{}"),
            settings=json.loads(r["settings"] or "{}"), unresolved=json.loads(r["unresolved"] or "{}"),
            parent_run=r.get("parent_run"), process=json.loads(r.get("process") or "{}"),
        )
