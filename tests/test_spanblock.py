"""Span and sample blocks (store schema 4): spans other than transactions, and samples, are stored as binary
column blocks; what goes in comes out the same through both readers (the store's column reader, ``load_run``, and
the stdlib row readers ``spanblock.iter_spans``/``sampleblock.rows``), old row-stored runs still read, a provisional
row loses to its finished span, and a damaged block is refused in one line. Profile blocks (schema 5): frames and
stacks in blocks and rows read in index order; a schema-4 store gains the table."""

import json
import sys

import numpy as np
import pytest
from conftest import run_cli, span_objects

from stepscope.core.model import Run
from stepscope.core.spantable import NO_PARENT
from stepscope.store import profileblock, sampleblock, spanblock
from stepscope.store.db import Store, StoreError
from stepscope.store.schema import SCHEMA_VERSION
from stepscope.store.reader import load_run, read_spans
from stepscope.store.schema import SCHEMA_VERSION

BIG = 2 ** 63 - 1


class Odd:
    def __str__(self) -> str:
        return "<odd>"


def sample_spans():
    """Spans of every shape a block must keep: no parent, no thread, errors, attributes of odd values,
    op None, names outside ASCII, integers at the int64 bounds."""
    return [
        (1, None, "pipe.__call__", "function", 0, 1_000, 7, None, None),
        (2, 1, "unet.forward", "function", 10, 500, 7, None, {"stepscope.step": 0, "shape": [1, 4, 64, 64]}),
        (3, 1, "unet.forward", None, 500, 900, None, "ValueError", {"obj": Odd()}),
        (4, 3, "naïve.名前", "http.client", 600, 650, 3, "builtins.RuntimeError", None),
        (BIG, -5, "edge", "function", -(2 ** 62), BIG, BIG, None, {}),
    ]


def test_a_block_gives_back_its_spans():
    spans = sample_spans()
    out = list(spanblock.spans_of(spanblock.encode(spans)))
    assert len(out) == len(spans)
    for a, b in zip(spans, out):
        assert b[:3] == a[:3] and b[4:6] == a[4:6] and b[7] == a[7]
        assert b[3] == (a[3] or "function") and b[6] == (a[6] or 0)
        assert b[8] == (json.loads(json.dumps(a[8], default=str)) if a[8] else None)
    assert list(spanblock.spans_of(spanblock.encode([]))) == []
    with pytest.raises(OverflowError):
        spanblock.encode([(2 ** 63, None, "x", "function", 0, 1, 1, None, None)])


def test_a_damaged_block_is_refused_with_what_is_wrong():
    body = spanblock.encode(sample_spans())
    for bad, says in [(body[:-3], "has"), (b"XXXX" + body[4:], "not a span block"), (b"", "too short")]:
        with pytest.raises(spanblock.BlockError, match=says):
            list(spanblock.spans_of(bad))


def _run(st: Store, rid: str) -> None:
    st.create_run(Run(id=rid, command=["x"], cwd="", host="", pid=0, status="ok", exit_code=0, error=None, start_ns=0,
                      end_ns=2_000, anchor_mono_ns=0, anchor_wall_ns=0, env={}, settings={}, unresolved={}), 0)


def test_rows_blocks_and_a_provisional_row_read_the_same_through_both_readers(tmp_path):
    st = Store(tmp_path)
    _run(st, "r")
    tx = (100, None, "run", "transaction", 0, 2_000, 7, None, None)
    # a flush while unet.forward (3) is open: its provisional row; the next flush writes it finished
    st.append("r", spans=[tx, *sample_spans()[:2]],
              open_spans=[(3, 1, "unet.forward", "function", 500, 700, 7, None, {"stepscope.open": True})])
    assert st.conn.execute("SELECT count(*) FROM spans WHERE run_id = 'r'").fetchone()[0] == 2  # tx + provisional
    st.append("r", spans=sample_spans()[2:])
    rows = st.conn.execute("SELECT span_id FROM spans WHERE run_id = 'r'").fetchall()
    assert rows == [(100,)]  # the transaction stays a row; the finished span replaced the provisional one
    assert st.conn.execute("SELECT count(*), sum(n) FROM span_blocks WHERE run_id = 'r'").fetchone() == (2, 5)
    assert st.counts("r")[0] == 6
    # a run lost with a stale provisional row of a span whose block entry exists: the block wins
    st.conn.execute("INSERT INTO spans VALUES ('r', 4, 3, 'naïve.名前', 'function', 600, 1999, 3, NULL,"
                    " '{\"stepscope.open\": true}')")
    objs = span_objects(st, "r")
    table = load_run(st, "r").spans
    assert len(objs) == len(table) == 6
    for a, b in zip(objs, table):
        assert a == b
    assert [(s.start_ns, s.span_id) for s in objs] == sorted((s.start_ns, s.span_id) for s in objs)
    four = table.get(4)
    assert four.end_ns == 650 and four.status == "error" and four.error_type == "builtins.RuntimeError"
    edge = table.get(BIG)
    assert edge.parent_id == -5 and edge.thread_id == BIG and edge.attrs == {}
    assert table.get(1).parent_id is None and int(table.parent[table.rows_of(np.array([1]))[0]]) == NO_PARENT
    assert table.get(2).attrs == {"stepscope.step": 0, "shape": [1, 4, 64, 64]}
    assert table.get(3).attrs["obj"] == "<odd>" and table.get(3).thread_id == 0
    st.delete_run("r")
    assert spanblock.count_all(st.conn) == 0
    assert st.conn.execute("SELECT count(*) FROM span_blocks").fetchone()[0] == 0


def test_a_run_with_a_damaged_block_fails_in_one_line_and_other_runs_still_read(tmp_path):
    store = tmp_path / "store"
    prog = tmp_path / "p.py"
    prog.write_text("def work(i):\n    return i\n\nfor i in range(500):\n    work(i)\n")
    for _ in range(2):
        r = run_cli(["run", "-q", "-t", "__main__.work", "--", sys.executable, str(prog)], store, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    st = Store(store)
    first, second = [x.id for x in reversed(st.list_runs())]
    assert st.counts(second)[0] == 501 and st.conn.execute(
        "SELECT count(*) FROM span_blocks WHERE run_id = ?", (second,)).fetchone()[0] == 1
    st.conn.execute("UPDATE span_blocks SET body = substr(body, 1, 100) WHERE run_id = ?", (second,))
    st.close()
    for cmd in (["report", second, "-o", str(tmp_path / "x.html")], ["explain", second], ["diff", first, second]):
        r = run_cli(cmd, store, cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "runs.db" in r.stderr and "span block" in r.stderr, r.stderr
    r = run_cli(["report", first, "-o", str(tmp_path / "ok.html")], store, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_a_schema_3_store_with_row_spans_gains_block_runs_beside_them(tmp_path):
    store = tmp_path / "store"
    st = Store(store)
    _run(st, "old")
    st.conn.executemany("INSERT INTO spans VALUES ('old',?,?,?,?,?,?,?,?,?)",
                        [(1, None, "a", "function", 0, 10, 1, None, None), (2, 1, "b", "function", 1, 5, 1, None, '{"k": 1}')])
    st.conn.execute("DROP TABLE span_blocks")
    st.conn.execute("UPDATE meta SET value = '3' WHERE key = 'format_version'")
    st.close()
    st = Store(store)  # migrated: the table is back, the old rows read as before
    assert st.conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()[0] == str(SCHEMA_VERSION)
    t = read_spans(st, "old")
    assert [s.name for s in t] == ["a", "b"] and t.get(2).attrs == {"k": 1}
    _run(st, "new")
    st.append("new", spans=[(1, None, "a", "function", 0, 10, 1, None, None)])
    assert [s.name for s in load_run(st, "new").spans] == ["a"]


def test_samples_in_rows_and_blocks_read_the_same_through_both_readers_in_time_order(tmp_path):
    st = Store(tmp_path)
    _run(st, "r")
    # an old row (schema 3), then two flushes as blocks, out of order across them
    st.conn.execute("INSERT INTO samples VALUES ('r', 150, 7, 0, 1000, NULL)")
    st.append("r", samples=[(300, 7, 1, 10_000_000, 5_000_000), (100, 8, 0), (200, 7, 2, None, -1)])
    st.append("r", samples=[(250, 8, 1, 9_000_000, 0)])
    assert st.counts("r")[1] == 5
    assert st.conn.execute("SELECT count(*) FROM sample_blocks WHERE run_id = 'r'").fetchone()[0] == 2
    want = [(100, 8, 0, None, None), (150, 7, 0, 1000, None), (200, 7, 2, None, None), (250, 8, 1, 9_000_000, 0),
            (300, 7, 1, 10_000_000, 5_000_000)]
    assert sampleblock.rows(st.conn, "r") == want
    cols = load_run(st, "r").profile
    assert cols.sample_t_ns.tolist() == [w[0] for w in want] and cols.sample_stack.tolist() == [w[2] for w in want]
    assert [None if np.isnan(x) else int(x) for x in cols.sample_cpu_ns] == [w[4] for w in want]
    assert [None if np.isnan(x) else int(x) for x in cols.sample_wall_ns] == [w[3] for w in want]
    st.conn.execute("UPDATE sample_blocks SET body = substr(body, 1, 20) WHERE rowid = (SELECT min(rowid) FROM sample_blocks)")
    with pytest.raises(StoreError, match="runs.db: run r: sample block of 3 samples has 20 bytes"):
        load_run(st, "r")
    with pytest.raises(sampleblock.BlockError, match="sample block of 3 samples has 20 bytes"):
        sampleblock.rows(st.conn, "r")
    st.delete_run("r")
    assert sampleblock.count_all(st.conn) == 0


def test_frames_and_stacks_in_rows_and_blocks_read_in_index_order(tmp_path):
    st = Store(tmp_path)
    _run(st, "r")
    st.conn.executemany("INSERT INTO frames VALUES ('r',?,?,?,?,?)", [(0, "main", "app", "/app.py", 1),
                                                                       (1, "f", "app", "/app.py", 5)])
    st.conn.execute("INSERT INTO stacks VALUES ('r', 0, '0,1')")
    profileblock.insert(st.conn, "r", "frames", 2, [("g", "mod", "/mod.py", 9), ("naïve", "m", "/m.py", 2 ** 31)])
    profileblock.insert(st.conn, "r", "stacks", 1, ["0,2", "0,2,3", ""])
    st.conn.executemany("INSERT INTO stacks VALUES ('r',?,?)", [(4, "0,1,3")])
    want_frames = [("main", "app", "/app.py", 1), ("f", "app", "/app.py", 5), ("g", "mod", "/mod.py", 9),
                   ("naïve", "m", "/m.py", 2 ** 31)]
    want_stacks = [(0, 1), (0, 2), (0, 2, 3), (), (0, 1, 3)]
    data = load_run(st, "r")
    assert [(f.function, f.module, f.file, f.line) for f in data.profile.frames] == want_frames
    assert [tuple(s) for s in data.profile.stacks] == want_stacks


def test_a_damaged_profile_block_is_refused_in_one_line(tmp_path):
    st = Store(tmp_path)
    _run(st, "r")
    st.conn.execute("INSERT INTO profile_blocks VALUES ('r', 'frames', 0, ?)", (b'[["f", "m"]]',))
    with pytest.raises(StoreError, match="runs.db: run r: a frames block"):
        load_run(st, "r")


def test_a_schema_4_store_gains_profile_blocks_and_keeps_its_rows(tmp_path):
    st = Store(tmp_path)
    _run(st, "old")
    st.conn.execute("INSERT INTO frames VALUES ('old', 0, 'f', 'm', '/m.py', 3)")
    st.conn.execute("INSERT INTO stacks VALUES ('old', 0, '0')")
    st.conn.execute("DROP TABLE profile_blocks")
    st.conn.execute("UPDATE meta SET value = '4' WHERE key = 'format_version'")
    st.close()
    st = Store(tmp_path)
    assert st.conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()[0] == str(SCHEMA_VERSION)
    data = load_run(st, "old")
    assert [f.function for f in data.profile.frames] == ["f"] and data.profile.stacks == [(0,)]
    st.delete_run("old")
    assert st.conn.execute("SELECT count(*) FROM frames").fetchone()[0] == 0
