"""The one writer: it owns the store's write connection and applies envelopes in order.

Requests hand their validated ``Batch`` to ``Writer.store`` (a coroutine of the server's event loop) and are
answered when it returns. Two ways:

- **A process of its own** (default; ``python -m stepscope.serve.ingest.writer_process``). The server writes each job
  (``pack``: a kind byte, the job id, a marshal of plain tuples) to a pipe and reads the answers from another, both
  on its event loop (``multiprocessing.connection`` framing; no threads: a hand-over of the GIL to a sender and
  from an answers thread cost ~0.3 ms of the server's CPU an envelope). The process takes whatever is queued (up
  to ``max_batch``), commits it to ``ingest_spool`` in one transaction (``spool``), answers, and then turns the
  spooled envelopes into runs (``expand``: each under its own SAVEPOINT with the deletion of its spool row, one
  commit), while the server reads the next request: a client sending one envelope after another waits for one
  small commit (~0.2 ms), not for the whole write (~1 ms of Python and SQLite), and the two processes work at the
  same time. Expansion keeps pace (after each spooled batch at least as many envelopes are expanded), readers of
  the store wait for what was acknowledged before they asked (``Store.settle_ingest``), an envelope whose
  expansion fails stays in the spool with the error and is tried again by the next writer, and a store error
  (a full disk) leaves the spool as it was, retried a second later. Applying in the server's own process
  competed with the requests for the GIL (~350 envelopes/s against ~900). A writer process that dies fails the
  requests waiting on it (503: the client retries) and is started again for the next one.
- **A thread** (``in_process=True``, ``STEPSCOPE_INGEST_WRITER=thread``; tests that patch ``apply``, platforms
  without ``fork``/pipes): applies each queued envelope under its own SAVEPOINT inside one transaction and answers
  once the runs are committed. An envelope that fails to apply is rolled back alone; a failed commit fails them
  all (nothing half-written).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import itertools
import marshal
import os
import pickle
import queue
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from ...store.db import Store
from .apply import apply, ensure_schema, prune
from .otlp_decode import TraceRecord
from .sentry import Batch, ProfileRecord, TransactionRecord


PRUNE_EVERY_S = 60.0


class WriterClosed(Exception):
    """The writer has stopped; nothing was written."""


class WriteError(Exception):
    """The writer process could not store an envelope (its message says why: a full disk, say)."""


_TX = tuple(f.name for f in dataclasses.fields(TransactionRecord))
_PR = tuple(f.name for f in dataclasses.fields(ProfileRecord))
_TR = tuple(f.name for f in dataclasses.fields(TraceRecord))


_JID = struct.Struct("<q")


def pack(jid: int, b: Batch, project: str | None) -> bytes:
    """One job as bytes for the writer process: a kind byte, the job id (int64), then ``marshal`` of plain tuples
    (the records' fields in order), ~5x faster to read back than a pickle of the dataclasses (0.43 ms an
    envelope of 50 spans and 200 samples, as much as validating it); a pickle where marshal refuses a value.
    Read by ``unpack``, in the same Python (the spool keeps these bytes: a writer of another Python version
    reads a marshal it cannot load as a failed envelope, kept in the spool)."""
    rec = (project, [tuple(getattr(t, f) for f in _TX) for t in b.transactions],
           [tuple(getattr(p, f) for f in _PR) for p in b.profiles], [tuple(getattr(p, f) for f in _PR) for p in b.chunks],
           b.counts, b.ignored, b.event_id, [tuple(getattr(t, f) for f in _TR) for t in b.traces])
    try:
        return b"M" + _JID.pack(jid) + marshal.dumps(rec)
    except ValueError:  # (an attribute value of a type marshal does not know)
        return b"P" + _JID.pack(jid) + pickle.dumps((b, project), protocol=pickle.HIGHEST_PROTOCOL)


def unpack_id(raw: bytes) -> int:
    """The job id of ``pack``'s bytes."""
    return _JID.unpack_from(raw, 1)[0]


def unpack(raw: bytes) -> tuple[int, Batch, str | None]:
    """``(job id, batch, project)`` from ``pack``'s bytes."""
    jid = _JID.unpack_from(raw, 1)[0]
    if raw[:1] == b"P":
        return (jid, *pickle.loads(raw[9:]))
    project, txs, profiles, chunks, counts, ignored, event_id, *traces = marshal.loads(raw[9:])
    return jid, Batch([TransactionRecord(*t) for t in txs], [ProfileRecord(*p) for p in profiles],
                      [ProfileRecord(*p) for p in chunks], counts, ignored, event_id,
                      [TraceRecord(*t) for t in (traces[0] if traces else [])]), project


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
        with _immediate(conn):
            for b, project in jobs:
                conn.execute("SAVEPOINT envelope")
                try:
                    results.append(apply(conn, b, project))
                    conn.execute("RELEASE envelope")
                except Exception as e:  # this envelope only
                    conn.execute("ROLLBACK TO envelope")
                    conn.execute("RELEASE envelope")
                    results.append(e)
    except sqlite3.Error as e:
        results = [e] * len(jobs)
    return results


class _Child:
    """One writer process and the two pipe ends the server holds, read and written on the event loop (no threads:
    a thread hop per envelope cost the server a GIL hand-over each way). Frames as ``multiprocessing.connection``
    writes them (a big-endian int32 length, or -1 and a uint64 past 2 GiB), so the child reads them with a
    ``Connection``."""

    def __init__(self, proc: subprocess.Popen, wfd: int, rfd: int) -> None:
        self.proc, self.wfd, self.rfd = proc, wfd, rfd
        self.outbuf = bytearray()  # what the pipe did not take yet (written when it can take more)
        self.inbuf = bytearray()
        self.ended = False  # its answers pipe reached EOF: the process is gone or going

    @staticmethod
    def frame(data: bytes) -> bytes:
        n = len(data)
        return (struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)) + data

    def frames(self) -> list[bytes]:
        """The complete frames in ``inbuf``, taken out of it."""
        out, buf, pos = [], self.inbuf, 0
        while len(buf) - pos >= 4:
            (n,) = struct.unpack_from("!i", buf, pos)
            head = 4
            if n == -1:
                if len(buf) - pos < 12:
                    break
                (n,) = struct.unpack_from("!Q", buf, pos + 4)
                head = 12
            if len(buf) - pos - head < n:
                break
            out.append(bytes(buf[pos + head:pos + head + n]))
            pos += head + n
        del buf[:pos]
        return out


class Writer:
    """Apply batches to the store at ``path``, in a process of its own (default) or a thread (``in_process``).
    ``store`` is a coroutine of the event loop the writer was made in (the server's); ``submit`` (thread mode)
    is thread-safe."""

    def __init__(self, path: str | Path, max_batch: int = 256, in_process: bool | None = None) -> None:
        self.path = Path(path)
        self.max_batch = max_batch
        self._closed = False
        if in_process is None:
            in_process = os.environ.get("STEPSCOPE_INGEST_WRITER", "").strip().lower() == "thread" or os.name != "posix"
        st = Store(self.path)  # creates the schema before the first request
        ensure_schema(st.conn)
        if not in_process:  # what failed to become runs is tried again (before the first read: settle_ingest)
            st.conn.execute("UPDATE ingest_spool SET error = NULL WHERE error IS NOT NULL")
        st.close()
        self.in_process = in_process
        if in_process:
            self._q: queue.Queue = queue.Queue()
            self._thread = threading.Thread(target=self._loop, name="stepscope-ingest-writer", daemon=True)
            self._thread.start()
        else:
            self._aloop = asyncio.get_running_loop()
            self._ids = itertools.count()
            self._waiting: dict[int, tuple[asyncio.Future, _Child]] = {}
            self._child: _Child | None = None
            self._start()

    async def store(self, b: Batch, project_id: str | None) -> dict:
        """Store one envelope; returns ``apply``'s dict once it is committed, or raises the write error
        (WriteError, WriterClosed, the thread writer's sqlite3 error)."""
        if self.in_process:
            return await asyncio.wrap_future(self.submit(b, project_id))
        if self._closed:
            raise WriterClosed("the server is shutting down")
        c = self._child
        # a process that died and whose EOF has not been read yet (a busy loop) is replaced here, not sent more
        # jobs to fail with: at most the envelopes in flight when it died get 503
        if c is None or c.ended or c.proc.poll() is not None:
            c = self._start()
        jid = next(self._ids)
        fut = self._aloop.create_future()
        self._waiting[jid] = (fut, c)  # and which process holds it, if that one dies
        self._write(c, _Child.frame(pack(jid, b, project_id)))
        return await fut

    # -- a process of its own ------------------------------------------------------------------------------------

    def _start(self) -> _Child:
        if self._child is not None:
            self._lost(self._child)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "stepscope.serve.ingest.writer_process", str(self.path), str(to_child_r), str(from_child_w),
                 str(self.max_batch)], pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                    str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH")]))})
        except BaseException:
            for fd in (to_child_w, from_child_r):
                os.close(fd)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        for fd in (to_child_w, from_child_r):
            try:  # room for many envelopes while the writer commits (Linux)
                fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ: 1 MiB (the default is 64 KiB)
            except OSError:
                pass
            os.set_blocking(fd, False)
        c = self._child = _Child(proc, to_child_w, from_child_r)
        self._aloop.add_reader(from_child_r, self._readable, c)
        return c

    def _write(self, c: _Child, data: bytes) -> None:
        if c.outbuf:  # (in order: behind what waits)
            c.outbuf += data
            return
        try:
            n = os.write(c.wfd, data)
        except BlockingIOError:
            n = 0
        except OSError:  # the process is gone: its answers pipe's EOF fails what waits on it
            self._lost(c)
            return
        if n < len(data):
            c.outbuf += memoryview(data)[n:]
            self._aloop.add_writer(c.wfd, self._writable, c)

    def _writable(self, c: _Child) -> None:
        try:
            n = os.write(c.wfd, c.outbuf)
        except BlockingIOError:
            return
        except OSError:
            self._lost(c)
            return
        del c.outbuf[:n]
        if not c.outbuf:
            self._aloop.remove_writer(c.wfd)

    def _readable(self, c: _Child) -> None:
        """Resolve the futures as the writer process answers (``[(job id, ok, result or message)]`` a frame)."""
        try:
            data = os.read(c.rfd, 1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost(c)
            return
        c.inbuf += data
        for raw in c.frames():
            for jid, ok, payload in pickle.loads(raw):
                fut = self._waiting.pop(jid, (None, None))[0]
                if fut is not None and not fut.done():
                    fut.set_result(payload) if ok else fut.set_exception(WriteError(payload))

    def _lost(self, c: _Child) -> None:
        """The process behind ``c`` is gone (or being replaced): stop watching its pipes and fail what still
        waits on it."""
        if c.ended:
            return
        c.ended = True
        self._aloop.remove_reader(c.rfd)
        if c.outbuf:
            self._aloop.remove_writer(c.wfd)
        for fd in (c.rfd, c.wfd):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._child is c:
            self._child = None
        lost = [j for j, (_, owner) in self._waiting.items() if owner is c]
        for j in lost:
            fut = self._waiting.pop(j)[0]
            if not fut.done():
                fut.set_exception(WriteError("the store writer stopped (its process ended): this envelope was not "
                                             "stored"))
        if c.proc.poll() is None:  # (replaced while alive: it finishes what it has, sees EOF and exits)
            threading.Thread(target=c.proc.wait, name="stepscope-ingest-reap", daemon=True).start()

    def submit(self, b: Batch, project_id: str | None) -> Future:
        """Thread mode: queue one envelope; the future's result is ``apply``'s dict, or it raises the write
        error."""
        fut: Future = Future()
        if self._closed:
            fut.set_exception(WriterClosed("the server is shutting down"))
            return fut
        self._q.put((b, project_id, fut))
        return fut

    async def aclose(self, timeout: float = 30.0) -> None:
        """Finish what is queued (every waiting envelope committed and answered), then stop the writer."""
        if self._closed:
            return
        self._closed = True
        if self.in_process:
            self._q.put(None)
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, timeout)
            return
        c = self._child
        if c is None:
            return
        self._write(c, _Child.frame(b""))  # the end: the process writes what came before it, answers, exits
        deadline = time.monotonic() + timeout
        while not c.ended and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        try:
            c.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait()
        self._lost(c)

    # -- a thread ------------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        st = Store(self.path)
        conn = st.conn
        try:  # what a writer process left in the spool
            while expand(conn, self.max_batch):
                pass
        except sqlite3.Error:
            pass
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


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection):
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; on any error ``ROLLBACK`` (nothing written) and the error raised."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise


def spool(conn: sqlite3.Connection, raw: list[bytes]) -> None:
    """Commit ``raw`` (``pack``'s bytes, one an envelope) to ``ingest_spool`` in one transaction; raises
    sqlite3.Error (nothing written then)."""
    now = time.time_ns()
    with _immediate(conn):
        conn.executemany("INSERT INTO ingest_spool (body, received_wall_ns) VALUES (?, ?)", [(r, now) for r in raw])


def expand(conn: sqlite3.Connection, limit: int) -> int:
    """Turn up to ``limit`` spooled envelopes (oldest first) into runs, in one transaction: each is applied
    under its own SAVEPOINT and its spool row deleted with it. An envelope whose ``apply`` raises is rolled
    back alone and stays in the spool with the error (``ingest_spool.error``; tried again when the writer
    starts next); a store error (a full disk) rolls the whole transaction back and raises, leaving the spool
    as it was. Returns how many envelopes left the spool."""
    rows = conn.execute("SELECT seq, body FROM ingest_spool WHERE error IS NULL ORDER BY seq LIMIT ?",
                        (limit,)).fetchall()
    if not rows:
        return 0
    with _immediate(conn):
        for seq, body in rows:
            conn.execute("SAVEPOINT envelope")
            try:
                _, b, project = unpack(body)
                apply(conn, b, project)
                conn.execute("DELETE FROM ingest_spool WHERE seq = ?", (seq,))
                conn.execute("RELEASE envelope")
            except sqlite3.Error:
                raise
            except Exception as e:  # this envelope only: kept, with why
                conn.execute("ROLLBACK TO envelope")
                conn.execute("RELEASE envelope")
                conn.execute("UPDATE ingest_spool SET error = ? WHERE seq = ?", (f"{type(e).__name__}: {e}"[:2000], seq))
    return len(rows)

