"""The one writer: a thread that owns the store's write connection and applies envelopes in order.

Requests hand their validated ``Batch`` to ``Writer.submit`` and wait on the returned future; the
thread takes whatever is queued (up to ``max_batch``), applies each under its own SAVEPOINT inside one
SQLite transaction (one fsync for many envelopes), commits, then answers every waiting request. An
envelope that fails to apply is rolled back alone; a failed commit fails them all (nothing half-written).
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from ..store.db import Store
from .apply import apply, ensure_schema, prune
from .sentry import Batch


PRUNE_EVERY_S = 60.0


class WriterClosed(Exception):
    """The writer has stopped; nothing was written."""


class Writer:
    """Apply batches to the store at ``path`` from one thread. ``submit`` is thread-safe."""

    def __init__(self, path: str | Path, max_batch: int = 256) -> None:
        self.path = Path(path)
        self.max_batch = max_batch
        self._q: queue.Queue = queue.Queue()
        self._closed = False
        st = Store(self.path)  # creates the schema; the thread opens its own connection
        ensure_schema(st.conn)
        st.close()
        self._thread = threading.Thread(target=self._loop, name="stepscope-ingest-writer", daemon=True)
        self._thread.start()

    def submit(self, b: Batch, project_id: str | None) -> Future:
        """Queue one envelope; the future's result is ``apply``'s dict, or it raises the write error."""
        fut: Future = Future()
        if self._closed:
            fut.set_exception(WriterClosed("the server is shutting down"))
            return fut
        self._q.put((b, project_id, fut))
        return fut

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop the thread."""
        if not self._closed:
            self._closed = True
            self._q.put(None)
            self._thread.join(timeout)

    def _loop(self) -> None:
        st = Store(self.path)
        conn = st.conn
        stop = False
        last_prune = 0.0
        while not stop:
            jobs = [self._q.get()]
            while len(jobs) < self.max_batch:
                try:
                    jobs.append(self._q.get_nowait())
                except queue.Empty:
                    break
            if None in jobs:
                stop = True
                jobs = [j for j in jobs if j is not None]
            if not jobs:
                continue
            results: list = []
            try:
                conn.execute("BEGIN IMMEDIATE")
                for b, project, fut in jobs:
                    conn.execute("SAVEPOINT envelope")
                    try:
                        results.append(apply(conn, b, project))
                        conn.execute("RELEASE envelope")
                    except Exception as e:  # this envelope only
                        conn.execute("ROLLBACK TO envelope")
                        conn.execute("RELEASE envelope")
                        results.append(e)
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                results = [e] * len(jobs)
            if time.monotonic() - last_prune > PRUNE_EVERY_S:
                last_prune = time.monotonic()
                try:
                    prune(conn, time.time_ns())
                except sqlite3.Error:
                    pass  # retried at the next interval
            for (_, _, fut), r in zip(jobs, results):
                if isinstance(r, BaseException):
                    fut.set_exception(r)
                else:
                    fut.set_result(r)
        st.close()
