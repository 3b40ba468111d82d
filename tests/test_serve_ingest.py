"""The ingest endpoint in-process (Starlette's TestClient): auth, limits, malformed input, linking of
profiles, duplicates, headers. The real Sentry SDK against a real server is in test_serve_sdk.py."""

import os
import signal
import gzip
import json
import time
import zlib

import brotli
import pytest
from conftest import wait_until
from serve_helpers import auth, chunk, envelope, transaction
from starlette.testclient import TestClient

from stepscope.store import keys as keystore
from stepscope.store import spanblock
from stepscope.store.db import Store
from stepscope.store.reader import load_run
from stepscope.serve.web import ServerConfig, create_app

EID = "a" * 32


@pytest.fixture
def app_key(tmp_path):
    store = tmp_path / "store"
    key = keystore.add(Store(store), "1").public_key
    return store, key


@pytest.fixture
def client(app_key):
    store, key = app_key
    app = create_app(ServerConfig(store=store, max_body_bytes=2 * 1024 * 1024, max_decoded_bytes=8 * 1024 * 1024))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        c.key = key
        c.store = store
        yield c


def runs(store) -> list:
    return Store(store).list_runs()


def post(c, body: bytes, headers=None, path="/api/1/envelope/"):
    return c.post(path, content=body, headers=auth(c.key) if headers is None else headers)


def test_transaction_becomes_a_run_on_its_own_clock(client):
    r = post(client, envelope([({"type": "transaction"}, transaction(EID, "txt2img", n_spans=3))], {"event_id": EID}))
    assert r.status_code == 200, r.text
    assert r.json()["id"] == EID
    data = load_run(Store(client.store))
    assert data.run.command == ["txt2img"] and data.run.env["source"] == "sentry"
    assert data.run.start_ns == 0 and data.run.wall_time_ns == 500_000_000
    assert data.run.anchor_wall_ns == 1_795_000_000 * 10**9
    root = [s for s in data.spans if s.op == "transaction"]
    assert len(root) == 1 and root[0].parent_id is None and root[0].duration_ns == 500_000_000
    kids = [s for s in data.spans if s.op == "function"]
    assert [s.name for s in kids] == ["mod.f0", "mod.f1", "mod.f2"]
    assert all(s.parent_id == root[0].span_id and s.thread_id == 7 for s in kids)
    assert kids[0].start_ns == 0 and abs(kids[1].start_ns - 125_000_000) < 1000  # float seconds: ~0.2 us steps
    assert kids[0].attrs["sentry.span_id"] == f"{2:016x}"


def test_auth(client, app_key, tmp_path):
    body = envelope([({"type": "transaction"}, transaction(EID))])
    assert post(client, body, {}).status_code == 401
    assert "sentry_key" in post(client, body, {}).json()["detail"]
    assert post(client, body, auth("0" * 32)).status_code == 401
    other = keystore.add(Store(client.store), "2").public_key
    assert post(client, body, auth(other)).status_code == 401  # a key of project 2 on project 1
    assert runs(client.store) == []
    assert post(client, body, {}, path=f"/api/1/envelope/?sentry_key={client.key}").status_code == 200
    dsn_body = envelope([({"type": "transaction"}, transaction("b" * 32))], {"dsn": f"http://{client.key}@127.0.0.1:8969/1"})
    assert post(client, dsn_body, {}, path="/stream").status_code == 200
    assert len(runs(client.store)) == 2
    store, _ = app_key
    open_app = create_app(ServerConfig(store=store, open_mode=True))
    with TestClient(open_app, base_url="http://127.0.0.1") as c:
        assert c.post("/stream", content=envelope([({"type": "transaction"}, transaction("c" * 32))])).status_code == 200
        # ... but not from a web page on another site (a drive-by POST from the user's browser)
        r = c.post("/stream", content=envelope([({"type": "transaction"}, transaction("e" * 32))]),
                   headers={"Origin": "https://evil.example"})
        assert r.status_code == 401 and "cross-site" in r.json()["detail"]
        assert c.post("/stream", content=envelope([({"type": "transaction"}, transaction("f" * 32))]),
                      headers={"Origin": "http://localhost:5173"}).status_code == 200


def test_open_mode_takes_a_cross_site_post_only_with_a_real_key(app_key):
    """A made-up ?sentry_key= must not open the door that --open shuts on cross-site browser POSTs."""
    store, key = app_key
    evil = {"Origin": "http://evil.example"}
    with TestClient(create_app(ServerConfig(store=store, open_mode=True)), base_url="http://127.0.0.1") as c:
        for path in ("/api/1/envelope/?sentry_key=made-up", "/stream?sentry_key=" + "0" * 32):
            r = c.post(path, content=envelope([({"type": "transaction"}, transaction("e" * 32))]), headers=evil)
            assert r.status_code == 401 and "cross-site" in r.json()["detail"], r.text
        r = c.post("/api/1/envelope/", content=envelope([({"type": "transaction"}, transaction("e" * 32))]),
                   headers={**evil, "X-Sentry-Auth": "Sentry sentry_key=made-up, sentry_version=7"})
        assert r.status_code == 401
        assert runs(store) == []
        # a key of the project: a Sentry browser SDK on a page of another origin, as without --open
        r = c.post(f"/api/1/envelope/?sentry_key={key}", content=envelope([({"type": "transaction"}, transaction(EID))]),
                   headers=evil)
        assert r.status_code == 200, r.text
        # ... of this project only
        other = keystore.add(Store(store), "2").public_key
        r = c.post(f"/api/1/envelope/?sentry_key={other}", content=envelope([({"type": "transaction"}, transaction("f" * 32))]),
                   headers=evil)
        assert r.status_code == 401
        # no Origin (not a browser) or a loopback one: any key, as open mode promises
        assert c.post("/stream?sentry_key=made-up",
                      content=envelope([({"type": "transaction"}, transaction("c" * 32))])).status_code == 200
        assert c.post("/stream?sentry_key=made-up", content=envelope([({"type": "transaction"}, transaction("d" * 32))]),
                      headers={"Origin": "http://127.0.0.1:3000"}).status_code == 200
    assert len(runs(store)) == 3
    # without --open a real key is enough cross-site (unchanged), a made-up one never
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as c:
        r = c.post("/stream?sentry_key=made-up", content=envelope([({"type": "transaction"}, transaction("9" * 32))]),
                   headers=evil)
        assert r.status_code == 401


@pytest.mark.parametrize("body, reason", [
    (b"", "empty envelope"),
    (b"not json\n", "envelope: header is not JSON"),
    (b"{}\n{\"length\": 3}\nabc\n", "header has no 'type'"),
    (b"{}\n{\"type\": \"transaction\", \"length\": 500}\n{}\n", "runs past the end"),
    (b"{}\n{\"type\": \"transaction\", \"length\": -1}\n", "'length' is not a non-negative integer"),
    (b"{}\n{\"type\": \"transaction\"}\n[1, 2]\n", "payload is not a JSON object"),
    (b"{}\n{\"type\": \"transaction\"}\n{\"event_id\": \"" + b"a" * 32 + b"\", \"start_timestamp\": \"yesterday\"}\n",
     "start_timestamp: 'yesterday' is not an RFC 3339 timestamp"),
    (b"{}\n{\"type\": \"profile_chunk\"}\n{\"profiler_id\": \"p\", \"chunk_id\": \"c\", \"profile\": {\"frames\": [], "
     b"\"stacks\": [[3]], \"samples\": []}}\n", "profile.stacks[0]: frame index 3 is not in profile.frames"),
])
def test_malformed_envelopes_get_400_with_the_reason_and_store_nothing(client, body, reason):
    # a valid transaction first in the same envelope: nothing of it may be stored either
    good = envelope([({"type": "transaction"}, transaction(EID))])
    r = post(client, good[:-1] + b"\n" + body.split(b"\n", 1)[1] if body.count(b"\n") > 1 else body)
    assert r.status_code == 400, r.text
    assert reason in r.json()["detail"]
    assert runs(client.store) == []


def _nested(n: int) -> str:
    return "[" * n + "]" * n


def _tx_with(eid: str, **where) -> bytes:
    """transaction(eid) with a span's data/tags or a top-level field replaced by JSON text."""
    doc = json.loads(transaction(eid))
    marks = {}
    for k, text in where.items():
        marks[f"@{k}@"] = text
        if k in ("data", "tags"):
            doc["spans"][0][k] = {"x": f"@{k}@"}
        else:
            doc[k] = f"@{k}@"
    out = json.dumps(doc)
    for m, text in marks.items():
        out = out.replace(f'"{m}"', text)
    return out.encode()


def test_deeply_nested_items_get_400_naming_the_field_and_store_nothing(client):
    """What is kept of an item as it came (a span's data and tags, fields of the run's env) may nest 16 levels
    (jsondepth.KEPT_DEPTH): deeper ones were stored, and a 1,000-level one was acknowledged and then failed to become a run
    (json.dumps' RecursionError in the writer); a 1,000-level thread name was a 413 (str()'s RecursionError)."""
    import sys

    cases = [(_tx_with(EID, data=_nested(100)), "item 1 (transaction): spans[0].data: nested more than 16 levels deep"),
             (_tx_with(EID, data=_nested(1000)), "item 1 (transaction): spans[0].data: nested more than 16 levels deep"),
             (_tx_with(EID, tags=_nested(17)), "item 1 (transaction): spans[0].tags: nested more than 16 levels deep"),
             (_tx_with(EID, release=_nested(50)), "item 1 (transaction): release: nested more than 16 levels deep"),
             (_tx_with(EID, release=_nested(100_000)), "item 1 (transaction): payload is not JSON (depth limit exceeded")]
    for body, reason in cases:
        r = post(client, envelope([({"type": "transaction"}, body)]))
        assert r.status_code == 400 and reason in r.json()["detail"], r.text
    assert post(client, envelope([({"type": "transaction"}, _tx_with(EID, data=_nested(15)))])).status_code == 200
    Store(client.store).delete_run(Store(client.store).resolve_id(None))
    # a thread name str() cannot make text (orjson parses up to 1,024 levels; str() stops at Python's recursion limit)
    prof = json.dumps({"version": "1", "platform": "python", "timestamp": 1_795_000_000.0,
                       "transactions": [{"id": EID, "name": "tx", "active_thread_id": "7"}],
                       "profile": {"frames": [], "stacks": [], "samples": [], "thread_metadata": {"7": {"name": "@"}}}})
    r = post(client, envelope([({"type": "profile"}, prof.replace('"@"', _nested(1015)).encode())]))
    if sys.version_info < (3, 12):  # (later Pythons' C recursion limit is higher: the name is then text, cut to 200)
        assert r.status_code == 400 and "item 1 (profile): nested too deeply to read" in r.json()["detail"], r.text
    else:
        assert r.status_code in (200, 400), r.text
    assert runs(client.store) == []
    stats = client.get("/api/stats").json()
    assert stats["spool"]["failed"] == 0 and stats["endpoint"]["too_large"] == 0


def test_bodies_in_gzip_deflate_and_br(client):
    for i, (enc, fn) in enumerate([("gzip", gzip.compress), ("deflate", zlib.compress), ("br", brotli.compress),
                                   ("gzip, br", lambda b: brotli.compress(gzip.compress(b)))]):
        eid = f"{i:032x}"
        body = fn(envelope([({"type": "transaction"}, transaction(eid, f"tx-{enc}"))]))
        r = post(client, body, {**auth(client.key), "Content-Encoding": enc})
        assert r.status_code == 200, (enc, r.text)
    assert sorted(r.command[0] for r in runs(client.store)) == ["tx-br", "tx-deflate", "tx-gzip", "tx-gzip, br"]
    r = post(client, b"\x1f\x8b garbage", {**auth(client.key), "Content-Encoding": "gzip"})
    assert r.status_code == 400 and "not valid gzip" in r.json()["detail"]
    r = post(client, b"x", {**auth(client.key), "Content-Encoding": "zstd-ish"})
    assert r.status_code == 400 and "unsupported Content-Encoding" in r.json()["detail"]


def test_decompression_bombs_and_big_bodies_get_413(client):
    zeros = b"\0" * (64 * 1024 * 1024)  # 64 MiB of zeros: over the 8 MiB decoded limit, tiny compressed
    for enc, fn in [("gzip", gzip.compress), ("deflate", zlib.compress), ("br", brotli.compress)]:
        bomb = fn(zeros)
        assert len(bomb) < 2 * 1024 * 1024
        r = post(client, bomb, {**auth(client.key), "Content-Encoding": enc})
        assert r.status_code == 413, (enc, r.text)
        assert "decompresses to more than" in r.json()["detail"]
    r = post(client, b"x" * (3 * 1024 * 1024))
    assert r.status_code == 413 and "over the limit" in r.json()["detail"]
    assert runs(client.store) == []
    assert client.get("/api/stats").json()["endpoint"]["too_large"] == 4


def test_v1_profile_is_linked_to_its_transaction_in_either_order(client):
    prof = json.dumps({"version": "1", "platform": "python", "timestamp": 1_795_000_000.0,
                       "transactions": [{"id": EID, "name": "tx", "active_thread_id": "7"}],
                       "profile": {"frames": [{"function": "f0", "module": "mod", "abs_path": "/m.py", "lineno": 1},
                                              {"function": "main", "module": "__main__", "abs_path": "/a.py", "lineno": 2}],
                                   "stacks": [[0, 1]],
                                   "samples": [{"elapsed_since_start_ns": str(k * 10_000_000), "thread_id": "7", "stack_id": 0}
                                               for k in range(40)],
                                   "thread_metadata": {"7": {"name": "MainThread"}}}}).encode()
    assert post(client, envelope([({"type": "profile"}, prof)])).status_code == 200  # the profile first
    assert runs(client.store) == []
    assert post(client, envelope([({"type": "transaction"}, transaction(EID))])).status_code == 200
    data = load_run(Store(client.store))
    assert len(data.profile) == 40 and data.profile.sample_t_ns[1] == 10_000_000
    assert [data.profile.frames[i].function for i in data.profile.stacks[0]] == ["main", "f0"]  # root first
    assert data.profile.thread_names[7] == "MainThread" and data.profile.hz == 100.0
    assert post(client, envelope([({"type": "profile"}, prof)])).status_code == 200  # re-sent: stored once
    assert len(load_run(Store(client.store)).profile) == 40


def test_chunks_link_by_profiler_id_and_keep_only_samples_inside_the_transaction(client):
    pid = "f" * 32
    t0 = 1_795_000_000.0
    # the chunk covers [t0 - 0.2, t0 + 0.8) at 100 Hz; the transaction is [t0, t0 + 0.5]
    assert post(client, envelope([({"type": "profile_chunk"}, chunk("1" * 32, pid, t0 - 0.2, n=100))])).status_code == 200
    assert post(client, envelope([({"type": "transaction"}, transaction(EID, start=t0, profiler_id=pid))])).status_code == 200
    assert len(load_run(Store(client.store)).profile) == 51
    # a second transaction, then its chunk (the SDK sends chunks when the profiler stops)
    assert post(client, envelope([({"type": "transaction"}, transaction("b" * 32, start=t0 + 10, profiler_id=pid))])).status_code == 200
    assert post(client, envelope([({"type": "profile_chunk"}, chunk("2" * 32, pid, t0 + 10, n=30))])).status_code == 200
    data = load_run(Store(client.store), "last")
    assert len(data.profile) == 30 and 0 <= min(data.profile.sample_t_ns) and max(data.profile.sample_t_ns) <= 500_000_000


def test_duplicates_and_other_item_types(client):
    body = envelope([({"type": "transaction"}, transaction(EID)), ({"type": "client_report"}, b'{"discarded_events": []}'),
                     ({"type": "attachment", "filename": "a.txt"}, b"hello"), ({"type": "session"}, b"{}")])
    for _ in range(3):
        assert post(client, body).status_code == 200
    assert len(runs(client.store)) == 1
    st = Store(client.store)
    st.delete_run(st.resolve_id(None))  # `stepscope rm`: the event may be sent again and stored anew
    assert post(client, body).status_code == 200 and len(runs(client.store)) == 1
    items = client.get("/api/stats").json()["items"]
    assert items["transaction"] == {"received": 4, "stored": 2}
    assert items["attachment"] == {"received": 4, "stored": 0} and items["client_report"]["stored"] == 0


def test_no_cors_grant_and_only_loopback_hosts(client):
    r = post(client, envelope([({"type": "transaction"}, transaction(EID))]), {**auth(client.key), "Origin": "https://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    assert client.get("/", headers={"Origin": "https://evil.example"}).headers.get("access-control-allow-origin") is None
    assert client.get("/", headers={"Host": "evil.example"}).status_code == 400  # DNS rebinding
    assert client.get("/static/../../etc/passwd").status_code == 404
    assert client.get("/static/report.js").status_code == 200
    assert client.get("/static/view.py").status_code == 404


def test_a_failed_write_answers_503_and_leaves_nothing_half_written_in_the_thread_writer(app_key, monkeypatch):
    import stepscope.serve.ingest.writer as writer

    store, key = app_key
    monkeypatch.setenv("STEPSCOPE_INGEST_WRITER", "thread")
    real = writer.apply

    def apply_then_fail(conn, b, project):
        real(conn, b, project)  # the run, its spans and samples are written ... then the disk fills up
        raise OSError("database or disk is full")

    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as client:
        client.key, client.store = key, store
        monkeypatch.setattr(writer, "apply", apply_then_fail)
        r = post(client, envelope([({"type": "transaction"}, transaction(EID))]))
        assert r.status_code == 503 and "could not be written" in r.json()["detail"]
        st = Store(store)
        assert runs(store) == [] and spanblock.count_all(st.conn) == 0
        monkeypatch.setattr(writer, "apply", real)
        assert post(client, envelope([({"type": "transaction"}, transaction(EID))])).status_code == 200  # the retry
        assert len(runs(store)) == 1


def _writer_pids() -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid == os.getpid() and b"stepscope.serve.ingest.writer_process" in cmd:
                out.append(int(d))
    return out


def _hooked_writer(tmp_path, monkeypatch, code: str) -> None:
    """The next writer processes run ``code`` after importing ``stepscope.serve.ingest.writer`` (as ``w``)."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text("import stepscope.serve.ingest.writer as w\n" + code)
    monkeypatch.delenv("STEPSCOPE_INGEST_WRITER", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))


def test_an_envelope_the_writer_process_cannot_commit_is_answered_503_and_nothing_of_it_stays(app_key, tmp_path,
                                                                                                monkeypatch):
    """The writer runs in a process of its own and answers once the envelope is committed to its spool: a commit
    that fails there (a full disk) is answered 503 and nothing of the envelope stays; a server whose writer works
    stores the retry."""
    import sqlite3

    store, key = app_key
    _hooked_writer(tmp_path, monkeypatch, "import sqlite3\n"
                   "def full(conn, raw):\n"
                   "    raise sqlite3.OperationalError('database or disk is full')\n"
                   "w.spool = full\n")
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as client:
        client.key, client.store = key, store
        assert _writer_pids()  # a process of its own
        r = post(client, envelope([({"type": "transaction"}, transaction(EID))]))
        assert r.status_code == 503 and "could not be written" in r.json()["detail"], r.text
        assert "disk is full" in r.json()["detail"]
        st = Store(store)
        assert runs(store) == [] and spanblock.count_all(st.conn) == 0
        assert st.conn.execute("SELECT count(*) FROM ingest_spool").fetchone()[0] == 0
    monkeypatch.undo()
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as client:
        client.key, client.store = key, store
        assert post(client, envelope([({"type": "transaction"}, transaction(EID))])).status_code == 200  # the retry
        assert len(runs(store)) == 1
    assert not _writer_pids()  # stopped with the server
    del sqlite3


def test_an_envelope_that_fails_to_become_a_run_is_kept_and_stored_by_the_next_writer(app_key, tmp_path,
                                                                                      monkeypatch):
    """An acknowledged envelope whose expansion into a run fails (here: the rows went in, then an error) leaves
    nothing half-written and stays in the spool with the error, never lost: the next writer (a fixed stepscope,
    a disk with room again) stores it without the client sending it again."""
    store, key = app_key
    _hooked_writer(tmp_path, monkeypatch, "real = w.apply\n"
                   "def apply_then_fail(conn, b, project):\n"
                   "    real(conn, b, project)\n"
                   "    raise OSError('database or disk is full')\n"
                   "w.apply = apply_then_fail\n")
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as client:
        client.key, client.store = key, store
        r = post(client, envelope([({"type": "transaction"}, transaction(EID))]))
        assert r.status_code == 200, r.text
        st = Store(store)
        # (the 200 came once the envelope was spooled; its expansion, which fails, comes after)
        wait_until(lambda: st.conn.execute("SELECT count(*) FROM ingest_spool WHERE error IS NOT NULL").fetchone()[0],
                   30, "the writer process to record the failed expansion in the spool")
        (err,) = st.conn.execute("SELECT error FROM ingest_spool").fetchone()
        assert "disk is full" in err
        assert runs(store) == [] and spanblock.count_all(st.conn) == 0
        assert client.get("/api/stats").json()["spool"] == {"waiting": 0, "failed": 1}
    monkeypatch.undo()
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as client:
        client.key, client.store = key, store
        # stored from the spool, no retry (by the new writer process, which is started with the server: a reader
        # waits for it only while it makes progress, so a slow start is waited for here)
        stored = wait_until(lambda: runs(store), 30, "the new writer to store the spooled envelope")
        assert [r.command for r in stored] == [["tx"]]
        assert Store(store).conn.execute("SELECT count(*) FROM ingest_spool").fetchone()[0] == 0
        assert post(client, envelope([({"type": "transaction"}, transaction(EID))])).status_code == 200  # a resend
        assert len(runs(store)) == 1  # is stored once


def test_a_killed_writer_process_is_started_again(client):
    """The writer process killed between two envelopes: at most one request is answered 503 (its envelope not
    stored: the SDK retries), and the next is stored by a new writer."""
    assert post(client, envelope([({"type": "transaction"}, transaction(EID))])).status_code == 200
    (pid,) = _writer_pids()
    os.kill(pid, signal.SIGKILL)
    codes = []
    for k in range(3):
        r = post(client, envelope([({"type": "transaction"}, transaction(f"{k + 1}" * 32))]))
        codes.append(r.status_code)
        if r.status_code == 200:
            break
    assert codes[-1] == 200 and codes.count(503) <= 1, codes
    assert len(runs(client.store)) == 2
    assert len(_writer_pids()) == 1 and _writer_pids()[0] != pid


def test_waiting_profiles_and_chunks_are_forgotten_a_day_after_they_came(client):
    import time

    from stepscope.serve.ingest.apply import prune

    pid = "f" * 32
    for k in range(2):
        assert post(client, envelope([({"type": "profile_chunk"}, chunk(f"{k}" * 32, pid, 1_795_000_000.0, n=10))])).status_code == 200
    st = Store(client.store)
    st.settle_ingest(timeout_s=60, stall_s=30)  # both envelopes written by the server's writer (it answers first)
    assert sorted(r[0] for r in st.conn.execute("SELECT chunk_id FROM ingest_chunks")) == ["0" * 32, "1" * 32]
    st.conn.execute("UPDATE ingest_chunks SET received_wall_ns = received_wall_ns - 2 * 86400 * 1000000000 WHERE chunk_id = ?",
                    ("0" * 32,))
    assert prune(st.conn, time.time_ns()) == 1  # old samples sent today stay; what came two days ago goes
    assert [r[0] for r in st.conn.execute("SELECT chunk_id FROM ingest_chunks")] == ["1" * 32]


def test_a_reader_waits_for_acknowledged_envelopes_only_while_a_writer_works_on_them(tmp_path):
    """``Store.settle_ingest``: with no server running, a spooled envelope (acknowledged, not yet a run) holds a
    reader up for the stall limit (0.5 s by default), not the whole time limit (2 s); a failed one not at all."""
    from stepscope.serve.ingest.apply import ensure_schema

    st = Store(tmp_path / "s")
    ensure_schema(st.conn)
    st.conn.execute("INSERT INTO ingest_spool (body, received_wall_ns) VALUES (x'00', 0)")
    reader = Store(tmp_path / "s")
    t = time.monotonic()
    assert reader.list_runs() == []  # (the defaults: a 0.5 s stall limit, a 2 s limit)
    assert time.monotonic() - t >= 0.5  # it did wait
    # which limit ended the wait, told apart by a wide margin (the defaults' 0.5 s against 2 s is no margin on a
    # busy machine): a 1 s stall limit against a 60 s limit
    t = time.monotonic()
    reader.settle_ingest(timeout_s=60, stall_s=1.0)
    assert 1.0 <= time.monotonic() - t < 30
    st.conn.execute("UPDATE ingest_spool SET error = 'x'")
    assert reader.list_runs() == []
    t = time.monotonic()
    reader.settle_ingest(timeout_s=60, stall_s=30)  # a failed one: no wait at all (not the 30 s stall limit)
    assert time.monotonic() - t < 15


def test_the_web_uis_lists_wait_for_acknowledged_envelopes_too(tmp_path):
    """docs/serve.md: a reader of the store, `stepscope runs` or the web UI, waits for what was acknowledged before it
    asked. The transaction list (``/``, ``/api/transactions``) and the compare page's run pickers read the runs as
    ``list_runs`` does: with an acknowledged envelope in the spool and no writer working on it, each holds on for
    the stall limit first (they read at once before, and missed a run the writer was still making)."""
    from stepscope.serve.ingest.apply import ensure_schema
    from stepscope.store.listing import transactions
    from stepscope.serve.web.compare import run_choices

    st = Store(tmp_path / "s")
    ensure_schema(st.conn)
    st.conn.execute("INSERT INTO ingest_spool (body, received_wall_ns) VALUES (x'00', 0)")
    for read in (transactions, run_choices):
        reader = Store(tmp_path / "s")
        t = time.monotonic()
        read(reader)
        assert time.monotonic() - t >= 0.5, read  # it waited (a lower bound: holds however busy the machine)


def test_the_thread_writer_stores_what_a_writer_process_left_in_the_spool(app_key, monkeypatch):
    """A store whose spool holds an acknowledged envelope (its server stopped before making the run), opened by a
    server with the thread writer: the run is made before the first read."""
    from stepscope.serve.ingest import sentry
    from stepscope.serve.ingest.apply import ensure_schema
    from stepscope.serve.ingest.envelope import parse
    from stepscope.serve.ingest.writer import pack

    store, key = app_key
    st = Store(store)
    ensure_schema(st.conn)
    b = sentry.batch(parse(envelope([({"type": "transaction"}, transaction(EID, "left"))])))
    st.conn.execute("INSERT INTO ingest_spool (body, received_wall_ns) VALUES (?, 0)", (pack(7, b, "1"),))
    monkeypatch.setenv("STEPSCOPE_INGEST_WRITER", "thread")
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as client:
        assert [r.command for r in runs(store)] == [["left"]]
        assert client.get("/api/stats").json()["spool"] == {"waiting": 0, "failed": 0}
