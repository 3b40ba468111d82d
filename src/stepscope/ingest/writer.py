"""The one writer: it owns the store's write connection and applies envelopes in order.

Requests hand their validated ``Batch`` to ``Writer.submit`` and wait on the returned future. The writer takes
whatever is queued (up to ``max_batch``), applies each under its own SAVEPOINT inside one SQLite transaction (one
commit for many envelopes), commits, then answers every waiting request. An envelope that fails to apply is rolled
back alone; a failed commit fails them all (nothing half-written).

Where: by default in a **process of its own** (``python -m stepscope.ingest.writer_process``, two pipes carrying marshalled
batches (``pack``: marshal) and answers, ``multiprocessing.connection`` framing). Applying an envelope is ~1 ms of Python and SQLite
work; in the server's process it competed for the GIL with the requests (the HTTP side alone answers ~900
envelopes/s, with the writer beside it ~350/s). A writer process that dies fails the requests waiting on it
(503: the client retries) and is started again for the next one. ``in_process=True`` keeps it a thread (tests that
patch ``apply``; platforms without ``fork``/pipes).
"""

from __future__ import annotations

import dataclasses
import fcntl
import itertools
import marshal
import os
import pickle
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path

from ..store.db import Store
from .apply import apply, ensure_schema, prune
from .sentry import Batch, ProfileRecord, TransactionRecord


PRUNE_EVERY_S = 60.0


class WriterClosed(Exception):
    """The writer has stopped; nothing was written."""


class WriteError(Exception):
    """The writer process could not store an envelope (its message says why: a full disk, say)."""


_TX = tuple(f.name for f in dataclasses.fields(TransactionRecord))
_PR = tuple(f.name for f in dataclasses.fields(ProfileRecord))


def pack(jid: int, b: Batch, project: str | None) -> bytes:
    """One job as bytes for the writer process: ``marshal`` of plain tuples (the records' fields in order), ~5x
    faster to read back than a pickle of the dataclasses (0.43 ms an envelope of 50 spans and 200 samples, as
    much as validating it); a pickle where marshal refuses a value. Read by ``unpack``, in the same Python."""
    rec = (jid, project, [tuple(getattr(t, f) for f in _TX) for t in b.transactions],
           [tuple(getattr(p, f) for f in _PR) for p in b.profiles], [tuple(getattr(p, f) for f in _PR) for p in b.chunks],
           b.counts, b.ignored, b.event_id)
    try:
        return b"M" + marshal.dumps(rec)
    except ValueError:  # (an attribute value of a type marshal does not know)
        return b"P" + pickle.dumps((jid, b, project), protocol=pickle.HIGHEST_PROTOCOL)


def unpack(raw: bytes) -> tuple[int, Batch, str | None]:
    """``(job id, batch, project)`` from ``pack``'s bytes."""
    if raw[:1] == b"P":
        return pickle.loads(raw[1:])
    jid, project, txs, profiles, chunks, counts, ignored, event_id = marshal.loads(raw[1:])
    return jid, Batch([TransactionRecord(*t) for t in txs], [ProfileRecord(*p) for p in profiles],
                      [ProfileRecord(*p) for p in chunks], counts, ignored, event_id), project


def quiet_gc(threshold: int = 50_000) -> None:
    """Python's cyclic GC tuned for a process that makes many short-lived, acyclic objects per request (an
    envelope's spans and samples as tuples and dicts, freed by reference counting): what exists now (modules,
    the app) is frozen out of every collection (``gc.freeze``) and the youngest generation is collected every
    ``threshold`` allocations instead of 700. Measured on 50-span envelopes: unpacking 0.18-0.28 -> 0.075 ms,
    validating 0.54 -> 0.40 ms an envelope. Cycles (exception tracebacks) are still collected."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, 20, 20)


def apply_jobs(conn: sqlite3.Connection, jobs: list[tuple[Batch, str | None]]) -> list:
    """Apply ``jobs`` in one transaction, each under its own SAVEPOINT; per job ``apply``'s dict or the exception.
    A failed commit fails them all."""
    results: list = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for b, project in jobs:
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
    return results


class Writer:
    """Apply batches to the store at ``path``, in a process of its own (default) or a thread (``in_process``).
    ``submit`` is thread-safe."""

    def __init__(self, path: str | Path, max_batch: int = 256, in_process: bool | None = None) -> None:
        self.path = Path(path)
        self.max_batch = max_batch
        self._closed = False
        st = Store(self.path)  # creates the schema before the first request
        ensure_schema(st.conn)
        st.close()
        if in_process is None:
            in_process = os.environ.get("STEPSCOPE_INGEST_WRITER", "").strip().lower() == "thread" or os.name != "posix"
        self.in_process = in_process
        self._lock = threading.Lock()
        if in_process:
            self._q: queue.Queue = queue.Queue()
            self._thread = threading.Thread(target=self._loop, name="stepscope-ingest-writer", daemon=True)
            self._thread.start()
        else:
            self._ids = itertools.count()
            self._waiting: dict[int, tuple[Future, subprocess.Popen]] = {}
            self._proc: subprocess.Popen | None = None
            self._outbox: queue.SimpleQueue = queue.SimpleQueue()
            self._sending = threading.Thread(target=self._sender, name="stepscope-ingest-sender", daemon=True)
            self._sending.start()
            self._start()

    # -- a process of its own ------------------------------------------------------------------------------------

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "stepscope.ingest.writer_process", str(self.path), str(to_child_r), str(from_child_w),
                 str(self.max_batch)], pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                    str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))})
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        for fd in (to_child_w, from_child_r):  # room for many envelopes while the writer commits (Linux)
            try:
                fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ: 1 MiB (the default is 64 KiB)
            except OSError:
                pass
        self._send = Connection(to_child_w, readable=False)
        recv = Connection(from_child_r, writable=False)
        self._reader = threading.Thread(target=self._answers, args=(recv, self._proc), name="stepscope-ingest-answers",
                                        daemon=True)
        self._reader.start()

    def _answers(self, recv: Connection, proc: subprocess.Popen) -> None:
        """Resolve the futures as the writer process answers; when it is gone, fail what still waits on it."""
        try:
            while True:
                for jid, ok, payload in recv.recv():
                    with self._lock:
                        fut = self._waiting.pop(jid, (None, None))[0]
                    if fut is not None:
                        fut.set_result(payload) if ok else fut.set_exception(WriteError(payload))
        except (EOFError, OSError, pickle.UnpicklingError):
            pass
        finally:
            recv.close()
            with self._lock:
                if self._proc is proc:  # the next submit starts another
                    self._proc = None
                    try:
                        self._send.close()
                    except OSError:
                        pass
                lost = [j for j, (_, p) in self._waiting.items() if p is proc]
                lost = [self._waiting.pop(j)[0] for j in lost]
            for f in lost:
                f.set_exception(WriteError("the store writer stopped (its process ended): this envelope was not "
                                           "stored"))
            proc.wait()

    def submit(self, b: Batch, project_id: str | None) -> Future:
        """Queue one envelope; the future's result is ``apply``'s dict, or it raises the write error."""
        fut: Future = Future()
        if self._closed:
            fut.set_exception(WriterClosed("the server is shutting down"))
            return fut
        if self.in_process:
            self._q.put((b, project_id, fut))
            return fut
        with self._lock:
            # a process that died and whose answers thread has not noticed yet (a busy machine) is replaced here,
            # not sent more jobs to fail with: at most the envelopes in flight when it died get 503
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            jid = next(self._ids)
            self._waiting[jid] = (fut, self._proc)  # and which process holds it, if that one dies
            self._outbox.put((jid, b, project_id, self._send))
        return fut

    def _sender(self) -> None:
        """Pickle and write the queued jobs to the writer process (never in the event loop: a full pipe blocks
        here, not the requests)."""
        while True:
            job = self._outbox.get()
            if job is None:
                return
            jid, b, project, conn = job
            try:
                conn.send_bytes(pack(jid, b, project))
            except (OSError, ValueError) as e:  # the process is gone (its answers thread fails the rest)
                with self._lock:
                    fut = self._waiting.pop(jid, (None, None))[0]
                if fut is not None:
                    fut.set_exception(WriteError(f"the store writer is not reachable ({e})"))

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop the writer."""
        if self._closed:
            return
        self._closed = True
        if self.in_process:
            self._q.put(None)
            self._thread.join(timeout)
            return
        with self._lock:
            proc = self._proc
        self._outbox.put(None)
        self._sending.join(timeout)  # every queued job written
        if proc is not None:
            try:
                self._send.send_bytes(b"")  # the end
                self._send.close()
            except (OSError, ValueError):
                pass
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self._reader.join(timeout)

    # -- a thread ------------------------------------------------------------------------------------------------

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
            results = apply_jobs(conn, [(b, p) for b, p, _ in jobs])
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


def _child(path: str, fd_in: int, fd_out: int, max_batch: int) -> None:
    """The writer process: read jobs, apply them in batches, answer ``[(job id, ok, result or message)]``."""
    recv = Connection(fd_in, writable=False)
    send = Connection(fd_out, readable=False)
    st = Store(path)
    quiet_gc()
    conn = st.conn
    last_prune = 0.0
    stop = False
    while not stop:
        try:
            first = recv.recv_bytes()
        except (EOFError, OSError):
            break
        raw = [first]
        while len(raw) < max_batch and raw[-1] and recv.poll(0):
            try:
                raw.append(recv.recv_bytes())
            except (EOFError, OSError):
                break
        if not raw[-1]:  # the end: what came before it is still written
            stop = True
            raw.pop()
        jobs, ids = [], []
        for r in raw:
            jid, b, project = unpack(r)
            ids.append(jid)
            jobs.append((b, project))
        if jobs:
            results = apply_jobs(conn, jobs)
            send.send([(jid, not isinstance(r, BaseException), r if not isinstance(r, BaseException) else str(r))
                       for jid, r in zip(ids, results)])
        if time.monotonic() - last_prune > PRUNE_EVERY_S:
            last_prune = time.monotonic()
            try:
                prune(conn, time.time_ns())
            except sqlite3.Error:
                pass
    st.close()
    send.close()

