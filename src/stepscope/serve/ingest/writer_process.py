"""Entry point of the ingest writer's process (``stepscope.serve.ingest.writer``): ``python -m
stepscope.serve.ingest.writer_process STORE FD_IN FD_OUT MAX_BATCH``."""

import sqlite3
import sys
import time
from multiprocessing.connection import Connection

from stepscope.serve.ingest.apply import prune
from stepscope.serve.ingest.writer import PRUNE_EVERY_S, expand, quiet_gc, spool, unpack_id
from stepscope.store.db import Store


def writer_main(path: str, fd_in: int, fd_out: int, max_batch: int) -> None:
    """The writer process. Envelopes are answered once committed to ``ingest_spool`` (one commit for what is
    queued: ``[(job id, ok, result or message)]``), then expanded into runs while the server reads the next
    request (``expand``): a sequential client waits for one small commit, not for the whole write. Expansion
    keeps pace with what comes in (after each spooled batch at least as many envelopes are expanded), and what a
    previous writer left in the spool is expanded first."""
    recv = Connection(fd_in, writable=False)
    send = Connection(fd_out, readable=False)
    st = Store(path)
    quiet_gc()
    conn = st.conn
    backlog = conn.execute("SELECT count(*) FROM ingest_spool").fetchone()[0]
    retry_at = 0.0  # after a store error, expansion waits a second before trying again
    last_prune = 0.0
    stop = False

    def expand_some(limit: int) -> None:
        nonlocal backlog, retry_at
        try:
            done = expand(conn, min(max_batch, limit))
            backlog = max(0, backlog - done) if done else 0
        except sqlite3.Error:
            retry_at = time.monotonic() + 1.0

    while True:
        if backlog and time.monotonic() >= retry_at and (stop or not recv.poll(0)):
            expand_some(backlog)
            continue
        if stop:
            break
        try:
            if backlog and not recv.poll(max(0.0, retry_at - time.monotonic())):
                continue
            first = recv.recv_bytes()
        except (EOFError, OSError):
            stop = True
            continue
        raw = [first]
        while len(raw) < max_batch and raw[-1] and recv.poll(0):
            try:
                raw.append(recv.recv_bytes())
            except (EOFError, OSError):
                break
        if not raw[-1]:  # the end: what came before it is still written
            stop = True
            raw.pop()
        if raw:
            ids = [unpack_id(r) for r in raw]
            try:
                spool(conn, raw)
            except sqlite3.Error as e:
                send.send([(jid, False, str(e)) for jid in ids])
            else:
                send.send([(jid, True, {"spooled": 1}) for jid in ids])
                backlog += len(raw)
                if time.monotonic() >= retry_at:  # keep pace: expand as many as just came in before taking more
                    expand_some(len(raw))
        if time.monotonic() - last_prune > PRUNE_EVERY_S:
            last_prune = time.monotonic()
            try:
                prune(conn, time.time_ns())
            except sqlite3.Error:
                pass
    st.close()
    send.close()


if __name__ == "__main__":
    writer_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
