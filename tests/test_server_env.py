"""``STEPSCOPE_SERVER=1``: a program started with it gets the control server, so that ``stepscope capture --pid`` can
attach, and importing ``stepscope`` starts nothing. The server is started by stepscope's start-up hook
(``stepscope-follow.pth``, installed into site-packages; ``stepscope.record.processes.startup_hook``): these tests
run the hook's text and function in a fresh interpreter, since the copy of the hook in this environment's
site-packages is the one of its last install, and in a virtual environment where stepscope is installed as
``pip install -e .`` installs it (``test_follow._installed_env``): a program that never imports stepscope gets the
server."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PTH = SRC / "stepscope-follow.pth"

#: prints whether this process published a control server, and whether the recording side was loaded
REPORT = ("import json, os, sys, threading\n"
          "control, threads = 'stepscope.record.control' in sys.modules, threading.active_count()\n"
          "from stepscope.program.client import find_server\n"
          "info = find_server(os.getpid())\n"
          "print(json.dumps({'server': bool(info) and info['pid'] == os.getpid(), 'control': control,\n"
          "                  'threads': threads}))\n")


def _run(tmp_path, code: str, server: str | None, *opts: str) -> dict:
    import json

    rt = tmp_path / "rt"
    rt.mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("STEPSCOPE_SERVER", "STEPSCOPE_FOLLOW")}
    env.update(PYTHONPATH=str(SRC), STEPSCOPE_RUNTIME_DIR=str(rt), STEPSCOPE_STORE=str(tmp_path / "store"))
    if server is not None:
        env["STEPSCOPE_SERVER"] = server
    r = subprocess.run([sys.executable, *opts, "-c", code + REPORT], env=env, capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return json.loads(r.stdout)


def test_importing_stepscope_starts_nothing(tmp_path):
    # -S: no site-packages, so no start-up hook: what the import alone does
    got = _run(tmp_path, "import stepscope\n", "1", "-S")
    assert got == {"server": False, "control": False, "threads": 1}


def test_the_hook_starts_the_server_with_the_variable_only(tmp_path):
    hook = "from stepscope.record.processes import startup_hook\nstartup_hook()\n"
    assert _run(tmp_path, hook, "1", "-S") == {"server": True, "control": True, "threads": 2}
    for value in (None, "0", ""):
        assert _run(tmp_path, hook, value, "-S") == {"server": False, "control": False, "threads": 1}


@pytest.mark.parametrize("server", ["1", None])
def test_the_pth_file_acts_on_the_variable(tmp_path, server):
    """The .pth text run as ``site`` runs it (each line that starts with ``import`` is executed): one ``in
    os.environ`` test per variable; without either, nothing of stepscope is imported."""
    lines = PTH.read_text().splitlines()
    assert [x for x in lines if x.strip()] and all(x.startswith("import ") for x in lines if x.strip())
    text = PTH.read_text()
    assert '"STEPSCOPE_SERVER" in os.environ' in text and '"STEPSCOPE_FOLLOW" in os.environ' in text
    code = (f"import sys\nfor line in open({str(PTH)!r}).read().splitlines():\n    exec(line) if line.startswith("
            f"'import ') else None\nassert ('stepscope' in sys.modules) is {server is not None}\n")
    got = _run(tmp_path, code, server, "-S")
    assert got == ({"server": True, "control": True, "threads": 2} if server else
                   {"server": False, "control": False, "threads": 1})


def test_an_installed_stepscope_starts_the_server_of_a_program_that_never_imports_it(tmp_path):
    from test_follow import _installed_env

    python = _installed_env(tmp_path)
    rt = tmp_path / "rt"
    rt.mkdir(mode=0o700)
    code = ("import json, os, sys, threading\n"
            "print(json.dumps(['stepscope' in sys.modules, threading.active_count()]))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("STEPSCOPE_SERVER", "STEPSCOPE_FOLLOW", "PYTHONPATH")}
    env.update(STEPSCOPE_RUNTIME_DIR=str(rt), STEPSCOPE_STORE=str(tmp_path / "store"))
    for server, seen in (("1", [True, 2]), (None, [False, 1])):
        if server:
            env["STEPSCOPE_SERVER"] = server
        p = subprocess.Popen([str(python), "-c", code + "sys.stdin.read()\n"], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        try:
            import json

            assert json.loads(p.stdout.readline()) == seen
            info = [json.loads(f.read_text()) for f in rt.glob(f"{p.pid}.json")]
            assert [i["pid"] for i in info] == ([p.pid] if server else [])
        finally:
            out, err = p.communicate("", timeout=60)
        assert p.returncode == 0 and err == "", err
        env.pop("STEPSCOPE_SERVER", None)
