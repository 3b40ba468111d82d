"""The store's schema version: older stores are migrated forward; a newer stepscope's store, another
program's SQLite file, a file that is not SQLite and a damaged one are refused by every command that
opens the store with one line naming the file (exit 2, no traceback), and never written to."""

import hashlib
import json
import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from serve_helpers import free_port

from stepscope.store.db import Store, StoreError
from stepscope.store.reader import load_run
from stepscope.store.schema import SCHEMA_VERSION

# the layout of the first stepscope stores (format_version 1): threads without native_id, no os_threads;
# and serve's chunks before received_wall_ns
V1_OLDEST = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE runs (
  id TEXT PRIMARY KEY, command TEXT NOT NULL, cwd TEXT, host TEXT, pid INTEGER,
  status TEXT NOT NULL, exit_code INTEGER, error TEXT,
  start_ns INTEGER, end_ns INTEGER, anchor_mono_ns INTEGER, anchor_wall_ns INTEGER,
  env TEXT, settings TEXT, unresolved TEXT, created_wall_ns INTEGER);
CREATE TABLE spans (
  run_id TEXT NOT NULL, span_id INTEGER NOT NULL, parent_id INTEGER, name TEXT NOT NULL, op TEXT,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, thread_id INTEGER, error_type TEXT, attrs TEXT,
  PRIMARY KEY (run_id, span_id)) WITHOUT ROWID;
CREATE TABLE frames (run_id TEXT NOT NULL, idx INTEGER NOT NULL, function TEXT, module TEXT, file TEXT, line INTEGER,
  PRIMARY KEY (run_id, idx)) WITHOUT ROWID;
CREATE TABLE stacks (run_id TEXT NOT NULL, idx INTEGER NOT NULL, frames TEXT NOT NULL, PRIMARY KEY (run_id, idx)) WITHOUT ROWID;
CREATE TABLE samples (run_id TEXT NOT NULL, t_ns INTEGER NOT NULL, thread_id INTEGER, stack INTEGER);
CREATE INDEX samples_run ON samples (run_id, t_ns);
CREATE TABLE threads (run_id TEXT NOT NULL, thread_id INTEGER, name TEXT, PRIMARY KEY (run_id, thread_id));
CREATE TABLE ingest_chunks (chunk_id TEXT PRIMARY KEY, profiler_id TEXT NOT NULL,
  start_wall_ns INTEGER, end_wall_ns INTEGER, body BLOB NOT NULL);
INSERT INTO meta VALUES ('format_version', '1');
INSERT INTO runs VALUES ('20250101-000000-abcd', '["python", "old.py"]', '/tmp', 'host', 1, 'ok', 0, NULL,
  0, 2000000, 0, 1735689600000000000, '{}', '{"profiles_hz": 100.0}', '{}', 1735689600000000000);
INSERT INTO spans VALUES ('20250101-000000-abcd', 1, NULL, 'old.work', 'function', 0, 1000000, 7, NULL, NULL);
INSERT INTO spans VALUES ('20250101-000000-abcd', 2, 1, 'old.inner', 'function', 100000, 900000, 7, NULL, '{"k": 1}');
INSERT INTO frames VALUES ('20250101-000000-abcd', 0, 'work', 'old', '/tmp/old.py', 3);
INSERT INTO stacks VALUES ('20250101-000000-abcd', 0, '0');
INSERT INTO samples VALUES ('20250101-000000-abcd', 500000, 7, 0);
INSERT INTO threads VALUES ('20250101-000000-abcd', 7, 'MainThread');
"""


def columns(db: Path, table: str) -> list[str]:
    return [r[1] for r in sqlite3.connect(db).execute(f"PRAGMA table_info({table})")]


def test_an_old_store_is_migrated_forward_and_reads_as_before(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    db = store / "runs.db"
    c = sqlite3.connect(db)
    c.executescript(V1_OLDEST)
    c.close()
    r = run_cli(["runs", "--json"], store)
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    assert run["id"] == "20250101-000000-abcd" and run["span_count"] == 2 and run["sample_count"] == 1
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert "native_id" in columns(db, "threads") and columns(db, "os_threads")
    assert "received_wall_ns" in columns(db, "ingest_chunks")
    assert run_cli(["report", "-o", str(tmp_path / "old.html")], store).returncode == 0
    data = load_run(Store(store))
    assert [s.name for s in data.spans] == ["old.work", "old.inner"] and data.profile.thread_names == {7: "MainThread"}
    assert {"wall_ns", "cpu_ns"} <= set(columns(db, "samples"))
    from stepscope.analysis.calltree import ProfileIndex

    index = ProfileIndex(data.profile)  # schema-2 samples: weighted by the old rule (one period at 100 Hz)
    assert index.weight.tolist() == [1e7] and not index.has_cpu
    # a run recorded into the migrated store, then the old one deleted
    prog = tmp_path / "p.py"
    prog.write_text("print('ok')\n")
    assert run_cli(["run", "-q", "--", sys.executable, str(prog)], store).returncode == 0
    assert run_cli(["rm", "20250101"], store).returncode == 0
    assert len(Store(store).list_runs()) == 1


def make_newer(db: Path) -> None:
    c = sqlite3.connect(db)
    c.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('format_version', '7');"
                    "CREATE TABLE runs (id TEXT PRIMARY KEY, shiny TEXT);")
    c.close()


def make_foreign(db: Path) -> None:
    c = sqlite3.connect(db)  # another tool's file that happens to have a runs table
    c.executescript("CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO runs VALUES (1, 'x');"
                    "CREATE TABLE experiments (id INTEGER PRIMARY KEY);")
    c.close()


def make_not_sqlite(db: Path) -> None:
    db.write_text("experiment,loss\n1,0.5\n" * 100)


def make_damaged(db: Path) -> None:
    """A real store whose pages after the first are overwritten: it opens, then reading it fails."""
    s = Store(db.parent)
    s.conn.execute("INSERT INTO runs (id, command, status) VALUES ('r1', '[\"x\"]', 'ok')")
    s.conn.executemany("INSERT INTO samples (run_id, t_ns, thread_id, stack) VALUES ('r1', ?, 1, 0)", ((i,) for i in range(5000)))
    s.close()
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xff" * (len(data) - page)
    db.write_bytes(bytes(data))


KINDS = {
    "newer": (make_newer, "runs.db: written by a newer stepscope (schema 7, this one reads up to "),
    "foreign": (make_foreign, "runs.db: not a stepscope store (an SQLite database with tables experiments, runs)"),
    "not-sqlite": (make_not_sqlite, "runs.db: not a stepscope store (not an SQLite database)"),
    "damaged": (make_damaged, "runs.db: cannot be read (database disk image is malformed)"),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_store_this_stepscope_cannot_read_is_refused_in_one_line(tmp_path, kind):
    make, message = KINDS[kind]
    store = tmp_path / "store"
    store.mkdir()
    db = store / "runs.db"
    make(db)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    if kind != "damaged":  # (a damaged one may open and fail on reading, as a sqlite3.DatabaseError)
        with pytest.raises(StoreError, match="runs.db: "):
            Store(store)
    marker = tmp_path / "ran"
    prog = tmp_path / "p.py"
    prog.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    commands = [["run", "--", sys.executable, str(prog)], ["runs"], ["report"], ["explain"], ["rm", "r1"],
                ["export"], ["suggest"], ["device"], ["keys", "list"], ["bench", "show"],
                ["serve", "--port", str(free_port())], ["demo", "--steps", "1"]]
    if kind in ("not-sqlite", "damaged"):
        commands = commands[:4] + [["serve", "--port", str(free_port())]]
    for args in commands:
        r = run_cli(args, store, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (args, r.stderr)
        assert lines[0].startswith("stepscope: error: ") and message in lines[0], (args, lines[0])
        assert r.stdout == "", (args, r.stdout)
    assert not marker.exists()  # stepscope run refused before starting the program
    if kind != "damaged":  # (the damaged one: SQLite may roll back its own journal)
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # never written to
        assert sorted(p.name for p in store.iterdir()) == ["runs.db"]
