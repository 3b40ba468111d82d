"""`stepscope run` on real programs: same behaviour as without it, and what it records."""

import json
import signal
import subprocess
import sys

import pytest
from conftest import PROGRAMS, cli_env, run_cli

from stepscope.store import Store
from stepscope.store.reader import load_run


def plain(args, store):
    return subprocess.run([sys.executable, *args], env=cli_env(store), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mode", ["ok", "exit 3", "exit-str", "raise", "thread"])
def test_program_behaves_exactly_as_without_stepscope(store, mode):
    prog = str(PROGRAMS / "behaviour.py")
    base = plain([prog, *mode.split()], store)
    traced = run_cli(["run", "-q", "--trace", "sstargets.funcs.add", "--trace", "sstargets.funcs.boom", "--",
                      sys.executable, prog, *mode.split()], store)
    assert traced.returncode == base.returncode
    assert traced.stdout == base.stdout
    assert traced.stderr == base.stderr  # tracebacks too: stepscope's frames are not in them
    run = load_run(Store(store))
    assert run.run.exit_code == base.returncode
    assert run.run.status == ("ok" if base.returncode == 0 else "error")
    if mode == "raise":
        boom = [s for s in run.spans if s.name == "sstargets.funcs.boom"]
        assert boom[0].status == "error" and boom[0].error_type == "ValueError"
        assert run.run.error == "ValueError"


def test_keyboard_interrupt_ends_like_python(store):
    prog = str(PROGRAMS / "behaviour.py")
    base = plain([prog, "keyboard"], store)
    traced = run_cli(["run", "-q", "--", sys.executable, prog, "keyboard"], store)
    assert base.returncode == -signal.SIGINT
    assert traced.returncode == -signal.SIGINT  # stepscope dies by SIGINT too, as python does
    assert traced.stderr == base.stderr
    assert load_run(Store(store)).run.status == "interrupted"


def test_spans_threads_and_root_transaction(store):
    r = run_cli(["run", "--json", "--trace", "sstargets.funcs.add", "--", sys.executable,
                 str(PROGRAMS / "behaviour.py"), "thread"], store)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.splitlines()[-1])
    stats = {s["name"]: s for s in doc["run"]["spans"]}
    assert stats["sstargets.funcs.add"]["count"] == 6
    data = load_run(Store(store))
    txn = [s for s in data.spans if s.op == "transaction"]
    assert len(txn) == 1 and txn[0].name.endswith("behaviour.py")
    adds = [s for s in data.spans if s.name == "sstargets.funcs.add"]
    main_tid = txn[0].thread_id
    assert sum(1 for s in adds if s.thread_id == main_tid and s.parent_id == txn[0].span_id) == 1
    worker = [s for s in adds if s.thread_id != main_tid]
    assert len(worker) == 5 and "worker" in data.profile.thread_names.values() or len(worker) == 5


def test_module_mode_and_trace_file(store, tmp_path):
    tf = tmp_path / "traces.toml"
    tf.write_text('functions_to_trace = [{qualified_name = "sstargets.funcs.add"}, "sstargets.nope.f"]\nprofiles_hz = 199\n')
    r = run_cli(["run", "--trace-file", str(tf), "-m", "sstargets"], store)
    assert r.stdout == "6\n"
    assert r.returncode == 0, r.stderr
    assert "not traced: sstargets.nope.f" in r.stderr
    data = load_run(Store(store))
    assert data.run.settings["profiles_hz"] == 199
    assert data.run.unresolved == {"sstargets.nope.f": "sstargets has no attribute or submodule 'nope'"}


def test_a_script_without_a_shebang_runs_under_this_python(store, tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import sys\nprint(sys.executable)\n")
    r = run_cli(["run", "-q", "--", str(script)], store)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == sys.executable
    data = load_run(Store(store))
    assert data.run.status == "ok"


def test_bad_inputs_are_one_line_errors(store, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("functions_to_trace = [3]\n")
    cases = [
        (["run", "--trace-file", str(bad), "--", sys.executable, "x.py"], f"{bad}: functions_to_trace[0]"),
        (["run", "--trace-file", str(tmp_path / "missing.toml"), "--", sys.executable, "x.py"], "missing.toml"),
        (["run", "--", "ls", "-l"], "ls: not a Python interpreter"),
        (["run", "--trace", "nodots", "--", sys.executable, "x.py"], "functions_to_trace[0]"),
        (["report", "nosuchrun"], "nosuchrun"),
        (["export", "--format", "svg"], "--format"),
    ]
    for args, needle in cases:
        r = run_cli(args, store)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("stepscope: error:") and needle in lines[0], (args, r.stderr)


def test_sigterm_keeps_what_was_recorded(store):
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "-q", "--trace", "sstargets.funcs.add", "--",
                             sys.executable, str(PROGRAMS / "sleeper.py")], env=cli_env(store), cwd=store.parent,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # (after 0.3 s of sampled sleep: the profile is not empty)
    # the child is the python running sleeper.py: signal it as a process manager would
    child = subprocess.run(["pgrep", "-f", "stepscope.record.launch .*sleeper.py"], capture_output=True, text=True).stdout.split()
    assert child
    import os

    os.kill(int(child[0]), signal.SIGTERM)
    assert proc.wait(30) == -signal.SIGTERM  # stepscope dies by the program's signal
    data = load_run(Store(store))
    assert data.run.status == "terminated" and data.run.exit_code == 128 + signal.SIGTERM
    assert sum(1 for s in data.spans if s.name == "sstargets.funcs.add") == 5
    assert len(data.profile) > 0


def test_runs_and_rm(store):
    for _ in range(2):
        assert run_cli(["run", "-q", "--", sys.executable, str(PROGRAMS / "behaviour.py")], store).returncode == 0
    listed = json.loads(run_cli(["runs", "--json"], store).stdout)["runs"]
    assert len(listed) == 2 and listed[0]["status"] == "ok" and listed[0]["span_count"] == 0  # (the run's transaction not counted)
    r = run_cli(["rm", listed[0]["id"], "--json"], store)
    assert json.loads(r.stdout)["deleted"] == [listed[0]["id"]]
    assert [x["id"] for x in json.loads(run_cli(["runs", "--json"], store).stdout)["runs"]] == [listed[1]["id"]]
    r = run_cli(["rm", listed[0]["id"]], store)
    assert r.returncode == 2 and f"no run {listed[0]['id']!r}" in r.stderr


def test_dash_c_programs_behave_as_with_python(store):
    code = "import sys; print(__name__, sys.argv[1:], 'launch' in globals()); sys.exit(4)"
    base = plain(["-c", code, "a", "b"], store)
    traced = run_cli(["run", "-q", "--", sys.executable, "-c", code, "a", "b"], store)
    assert base.stdout == "__main__ ['a', 'b'] False\n"
    assert (traced.returncode, traced.stdout, traced.stderr) == (base.returncode, base.stdout, base.stderr)


def test_a_name_certain_to_fail_is_reported_before_the_program_starts(tmp_path):
    """A misspelt name in a module on disk is said before the program runs (nothing imported), with the
    nearest names; names it cannot be sure of (re-exports, inherited methods) are left to the run."""
    import subprocess

    from conftest import cli_env

    store = tmp_path / "store"
    p = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "--trace", "sstargets.funcs.ad",
                        "--trace", "sstargets.funcs.add", "--", sys.executable, "-c",
                        "import sys; sys.stderr.write('program starts\\n'); from sstargets import funcs; funcs.add(1)"],
                       env=cli_env(store), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    first = next(i for i, ln in enumerate(lines) if "sstargets.funcs.ad:" in ln)
    assert first < lines.index("program starts")
    assert "did you mean sstargets.funcs.add" in " ".join(lines[first:first + 3])
    assert sum("sstargets.funcs.ad:" in ln for ln in lines) == 1  # said once, not again at the end
