"""Bad arguments get one clear line, never a traceback: a file-shaped `device` argument that does not
exist is "file not found", not "no run"; `explain --span` with an unknown name lists the run's spans."""

import sys

import pytest
from conftest import PROGRAMS, run_cli


@pytest.fixture(scope="module")
def repeats_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("errors") / "store"
    r = run_cli(["run", "-q", "--trace", "__main__.step", "--trace", "__main__.costly", "--",
                 sys.executable, str(PROGRAMS / "repeats.py")], store)
    assert r.returncode == 0, r.stderr
    return store


@pytest.mark.parametrize("arg", ["nosuch.json", "nosuch.json.gz", "nosuch.gz", "traces/nosuch", "./nosuch", "~/nosuch-stepscope.json"])
def test_device_names_a_missing_trace_file(repeats_store, arg):
    r = run_cli(["device", arg], repeats_store)
    assert r.returncode == 2 and r.stderr.strip() == f"stepscope: error: file not found: {arg}", r.stderr


def test_device_keeps_run_ids_and_refuses_a_folder(repeats_store, tmp_path):
    r = run_cli(["device", "nosuchrun"], repeats_store)
    assert r.returncode == 2 and r.stderr.strip() == f"stepscope: error: no run 'nosuchrun' in store {repeats_store}"
    (tmp_path / "t.json").mkdir()
    r = run_cli(["device", str(tmp_path / "t.json")], repeats_store)
    assert r.returncode == 2 and r.stderr.strip().endswith("t.json: not a file (give a Kineto trace .json/.json.gz, an XLA capture folder, or a run id)")


def test_explain_with_an_unknown_span_lists_the_span_names(repeats_store):
    r = run_cli(["explain", "--span", "NoSuchSpan"], repeats_store)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0].startswith("stepscope: error: --span NoSuchSpan: no span of that name in run ")
    assert lines[0].endswith("; its span names:")
    assert lines[1:3] == ["  __main__.step  (12 calls)", "  __main__.costly  (3 calls)"]
    assert len(lines) == 4 and lines[3].endswith("repeats.py  (1 call)")  # the run's root transaction
    # a name that exists still works, by suffix too
    assert run_cli(["explain", "--span", "step"], repeats_store).returncode == 0
