"""Input nested far past what the parsers and Python recurse through (``stepscope.core.jsondepth``): every file, run folder
and request stepscope reads gets one line naming it, never a traceback, and nothing too deep is kept."""

import gzip
import json
import socket
import sys
import threading

import orjson
import pytest
from conftest import run_cli
from serve_helpers import auth, envelope, transaction
from starlette.testclient import TestClient

from stepscope.device import kineto
from stepscope.core.jsondepth import KEPT_DEPTH, within
from stepscope.store import keys as keystore
from stepscope.store.db import Store
from stepscope.serve.web import ServerConfig, create_app

DEEP = 100_000


def nest(n: int) -> str:
    return "[" * n + "]" * n


def one_line_naming(r, path) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stdout == "" and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr[-2000:]
    assert r.stderr.startswith(f"stepscope: error: {path}: "), r.stderr


def test_within_measures_any_depth_without_recursion():
    assert within(1, 0) and within([], 1) and not within([], 0) and within({"a": [1, {"b": 2}]}, 3)
    assert not within({"a": [1, {"b": 2}]}, 2)
    deep = []
    for _ in range(DEEP):  # far past the recursion limit
        deep = [deep]
    assert not within(deep, KEPT_DEPTH) and within(deep, DEEP + 1)


def test_device_on_a_trace_file_nested_100000_levels_is_one_line(tmp_path, store):
    x = '{"ph":"X","cat":"cpu_op","name":"aten::mm","ts":1,"dur":5,"pid":1,"tid":1,"args":%s}'
    docs = {
        "top.json": '{"traceEvents": ' + nest(DEEP) + "}",  # the brief's file: msgspec's RecursionError before
        "list.json": nest(DEEP),
        "args.json": '{"traceEvents": [' + x % ('{"Input Dims": %s}' % nest(DEEP)) + "]}",
        "meta.json": '{"traceEvents": [], "distributedInfo": ' + nest(DEEP) + "}",
        "xla.trace.json": '{"traceEvents": [{"ph":"X","name":"StepMarker","ts":1,"dur":1}, ' + nest(DEEP) + "]}",
    }
    for name, text in docs.items():
        for path, body in ((tmp_path / name, text.encode()), (tmp_path / (name + ".gz"), gzip.compress(text.encode()))):
            path.write_bytes(body)
            one_line_naming(run_cli(["device", str(path)], store), path)
    cap = tmp_path / "cap" / "plugins" / "profile" / "2025_01_01_00_00_00"
    cap.mkdir(parents=True)
    (cap / "host.trace.json.gz").write_bytes(gzip.compress(docs["xla.trace.json"].encode()))
    one_line_naming(run_cli(["device", str(tmp_path / "cap"), "--json"], store), cap / "host.trace.json.gz")


def test_values_nested_past_python_are_refused_or_dropped_by_the_trace_loaders(tmp_path):
    """Depths orjson parses (< 1,024) but msgspec, str() or orjson.dumps (255) do not: the loader refuses a name it
    would have to make text, and keeps no deep shape or device property (the report and --json write them)."""
    marker = '{"ph":"X","cat":"user_annotation","name":"stepscope.clock_sync 0","ts":0,"dur":1,"pid":1,"tid":1}'
    mm = '{"ph":"X","cat":"cpu_op","name":%s,"ts":1,"dur":5,"pid":1,"tid":1,"args":{"External id":1,"Input Dims":%s}}'
    for n in (300, 990):
        f = tmp_path / f"name{n}.json"
        f.write_text('{"traceEvents": [%s, %s]}' % (marker, mm % (nest(n), "[[1, 2], [2, 3]]")))
        with pytest.raises(kineto.TraceError, match="name is nested more than 16 levels deep") as e:
            kineto.load(f)
        assert str(f) in str(e.value)
        f = tmp_path / f"dims{n}.json"
        f.write_text('{"traceEvents": [%s, %s, %s], "deviceProperties": [{"name": %s}, 7]}'
                     % (marker, mm % ('"aten::mm"', nest(n)), mm % ('"aten::mm"', "[[4, 5], [5, 6]]"), nest(n)))
        tr = kineto.load(f)
        assert tr.device_name is None and tr.device_properties == [] and len(tr) == 3
        assert "Input Dims" not in tr.args[1] and tr.args[2]["Input Dims"] == [[4, 5], [5, 6]]
        doc = orjson.loads(f.read_bytes())
        slow = kineto.from_events(doc["traceEvents"], str(f), doc)  # the general reader: the same bound
        assert "Input Dims" not in slow.args[1] and slow.args[2]["Input Dims"] == [[4, 5], [5, 6]]
        assert slow.device_name is None


def test_malformed_ids_and_properties_are_not_tracebacks(tmp_path, store):
    """(Found on the way: a list as a pid or a category, a dict as a stream, a number as a device's properties.)"""
    cases = {"pid.json": '{"traceEvents":[{"ph":"X","ts":1,"dur":1,"pid":[1]},{"ph":"X","ts":2,"dur":1,"pid":2}]}',
             "stream.json": '{"traceEvents":[{"ph":"X","cat":"kernel","ts":1,"dur":1,"args":{"stream":{"a":1}}}]}',
             "props.json": '{"traceEvents":[{"ph":"X","ts":1,"dur":1}],"deviceProperties":[1]}',
             "cat.json": '{"traceEvents":[{"ph":"X","ts":1,"dur":1,"cat":["kernel"]},{"ph":"X","ts":2,"dur":1,"cat":{}}]}',
             "hash.trace.json": '{"traceEvents":[{"ph":"X","name":"XLAGraphExecutor::Compile","ts":1,"dur":1,"pid":[1],'
                                '"tid":1,"args":{"graph_hash":[1]}}]}'}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        r = run_cli(["device", str(tmp_path / name), "--json"], store)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (name, r.stderr[-2000:])


@pytest.fixture
def run_folder(tmp_path):
    """A store with one (ingested) run; its run folder, where the device files go."""
    store = tmp_path / "store"
    key = keystore.add(Store(store), "1").public_key
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as c:
        r = c.post("/api/1/envelope/", content=envelope([({"type": "transaction"}, transaction("a" * 32))]),
                   headers=auth(key))
        assert r.status_code == 200, r.text
    rid = Store(store).list_runs()[0].id
    folder = store / "runs" / rid
    folder.mkdir(parents=True)
    return store, rid, folder


def test_a_runs_deep_device_files_are_one_line_in_the_cli_and_an_error_page_on_the_web(run_folder):
    store, rid, folder = run_folder
    marker = '{"ph":"X","cat":"user_annotation","name":"stepscope.clock_sync 0","ts":0,"dur":1,"pid":1,"tid":1}'
    trace = folder / "device_trace.json.gz"
    trace.write_bytes(gzip.compress(('{"traceEvents": [%s, %s]}' % (marker, nest(DEEP))).encode()))
    for args in (["device", rid], ["device", rid, "--json"], ["report", rid, "-o", str(store.parent / "r.html")],
                 ["export", rid, "--format", "chrome", "-o", str(store.parent / "c.json")]):
        one_line_naming(run_cli(args, store), trace)
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as c:  # (raises a 500's error)
        for path in (f"/runs/{rid}", f"/runs/{rid}/device", f"/runs/{rid}/report.html", f"/api/runs/{rid}/view",
                     f"/runs/{rid}/export/chrome"):
            r = c.get(path)
            assert r.status_code == 500 and f"{trace}: not JSON (depth limit exceeded" in r.text, (path, r.text[:300])
    trace.write_bytes(gzip.compress(('{"traceEvents": [%s]}' % marker).encode()))
    for name, text in (("device_probe.json", nest(DEEP)), ("compile_report.json", '{"graph_breaks": %s}' % nest(DEEP)),
                       ("compile_report.json", '{"graph_breaks": %s}' % nest(300))):
        (folder / name).write_text(text)
        one_line_naming(run_cli(["device", rid], store), folder / name)
        (folder / name).unlink()
    xla = folder / "xla_trace" / "plugins" / "profile" / "t" / "h.trace.json.gz"
    xla.parent.mkdir(parents=True)
    xla.write_bytes(gzip.compress(b'{"traceEvents": [{"ph":"X","name":"stepscope.clock_sync main@1 5","ts":1,"dur":1}]}'))
    (folder / "xla_metrics.json").write_text(nest(DEEP))
    one_line_naming(run_cli(["device", rid], store), folder / "xla_metrics.json")
    xla.write_bytes(gzip.compress(('{"traceEvents": [%s]}' % nest(DEEP)).encode()))
    one_line_naming(run_cli(["device", rid], store), xla)


def test_toml_files_nested_too_deeply_are_one_line(tmp_path, store):
    for body in ("functions_to_trace = " + nest(DEEP), "x = " + "{a = " * DEEP + "1" + "}" * DEEP):
        f = tmp_path / "traces.toml"
        f.write_text(body + "\n")
        one_line_naming(run_cli(["run", "--trace-file", str(f), "--", sys.executable, "-c", "pass"], store), f)
    f = tmp_path / "bench.toml"
    f.write_text("[matrix]\nsteps = " + nest(DEEP) + "\n")
    one_line_naming(run_cli(["bench", "--config", str(f)], store), f)


def test_the_control_server_drops_a_deep_or_odd_request_and_goes_on(tmp_path, monkeypatch):
    """The in-program capture server reads a line from anyone on the host before the token: nothing of it may
    reach the program (a traceback from its thread would be printed on the program's stderr)."""
    from stepscope.record import control as server

    monkeypatch.setenv("STEPSCOPE_RUNTIME_DIR", str(tmp_path / "rt"))
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    srv = server.ControlServer(store=str(tmp_path / "store"))
    try:
        for line in (nest(DEEP), "[1, 2]", '"token"', json.dumps({"token": "nope"})):
            with socket.create_connection(srv.address, timeout=30) as s:
                s.sendall(line.encode() + b"\n")
                reply = s.makefile("r").readline()  # "" once the server closed the connection
            for t in threading.enumerate():
                if t.name == "stepscope-capture":
                    t.join(30)
            assert raised == [], raised
            assert reply == ('{"error": "bad token"}\n' if "nope" in line else ""), (line[:20], reply)
    finally:
        srv.close()
