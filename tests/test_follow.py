"""How ``stepscope run`` follows the Python processes a program starts (``stepscope.record.processes``), seen from the
program: a followed process that outlives the program (multiprocessing's resource tracker, a daemon) still finds
stepscope when the program has ended; the program's environment and ``sys.path`` are those of a plain run."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from conftest import cli_env

from stepscope.store.db import Store
from stepscope.store.reader import load_run

#: a program that starts a Python child and ends at once: the child is still starting (stepscope's launcher
#: importing stepscope) as ``stepscope run`` settles the run; it waits for ``stepscope run`` (its grandparent) to
#: end, then starts a Python process of its own, calls a traced function and ends
LATE_CHILD = textwrap.dedent('''\
    import os, subprocess, sys
    CHILD = """
    import subprocess, sys, time
    def ended(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rpartition(")")[2].split()[0] == "Z"
        except OSError:
            return True
    def work():
        return 2
    deadline = time.monotonic() + 60
    while not ended(int(sys.argv[1])) and time.monotonic() < deadline:
        time.sleep(0.005)
    print(subprocess.run([sys.executable, "-c", "pass"]).returncode)
    work()
    print("child done", flush=True)
    """
    def work():
        return 1
    work()
    subprocess.Popen([sys.executable, "-c", CHILD, str(os.getppid())])
    print("parent done", flush=True)
''')


def _other_venv(tmp_path):
    """A bare virtual environment of this interpreter: not the one stepscope runs in (no stepscope installed)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv / "bin" / "python"


def test_a_child_that_outlives_the_program_finds_stepscope_to_its_end(tmp_path):
    """Issue 39: a spawn pool's resource tracker (a followed interpreter that lives until its program ends) printed
    a traceback from stepscope's launcher: ``stepscope run`` removed the folder it had put on ``PYTHONPATH`` for
    another interpreter as soon as the program ended, while the tracker was still importing stepscope from it.
    Several runs (to a deadline): each child must start and end quietly, and it and the process it starts once
    ``stepscope run`` has ended must be recorded as processes of the run."""
    python = _other_venv(tmp_path)
    (tmp_path / "late.py").write_text(LATE_CHILD)
    deadline = time.monotonic() + 30
    runs = 0
    while runs < 5 and (runs < 1 or time.monotonic() < deadline):
        store = tmp_path / f"store{runs}"
        r = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "-t", "__main__.work", "--", str(python),
                            "late.py"], cwd=tmp_path, env=cli_env(store), capture_output=True, text=True, timeout=120)
        runs += 1
        assert (r.returncode, r.stderr) == (0, ""), f"run {runs}: {r.stderr}"
        assert r.stdout == "parent done\n0\nchild done\n", f"run {runs}"
        st = Store(store)
        try:
            (top,) = st.list_runs()
            kids = st.process_runs(top.id)
            assert [(k.command[1:2], k.status, k.exit_code) for k in kids] == [(["-c"], "ok", 0)] * 2, f"run {runs}"
        finally:
            st.close()


REPO = Path(__file__).resolve().parent.parent
#: stepscope's start-up hook (``processes.HOOK_PTH``)
HOOK_PTH = "stepscope-follow.pth"

#: a program that shows what it sees (its PYTHONPATH, sys.path, its environment's names) in itself and in the Python
#: processes it starts (a subprocess of python, a spawn process)
SEEING = textwrap.dedent('''\
    import json, multiprocessing as mp, os, subprocess, sys

    def work(who):
        print(json.dumps({"who": who, "PYTHONPATH": os.environ.get("PYTHONPATH"), "path": sys.path,
                          "env": sorted(os.environ), "sitecustomize": getattr(sys, "sitecustomized", 0)}), flush=True)

    if __name__ == "__main__":
        work("top")
        subprocess.run([sys.executable, "-c", "import seeing; seeing.work('subprocess')"], check=True)
        p = mp.get_context("spawn").Process(target=work, args=("spawn",))
        p.start()
        p.join()
''')


def _installed_env(tmp_path) -> Path:
    """A virtual environment with stepscope installed as ``pip install -e .`` installs it: the editable wheel that
    setup.py builds (setuptools' PEP 660 hook, on a copy of the source tree, without the C recorder) unpacked into
    its site-packages, and this process's ``sys.path`` after it for stepscope's dependencies. Its python."""
    pytest.importorskip("setuptools")
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy2(REPO / name, tree / name)
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                            "print(b.build_editable(sys.argv[1]))", str(wheels)], cwd=tree, capture_output=True,
                           text=True, timeout=300, env=dict(os.environ, CC="false"))
    assert build.returncode == 0, build.stderr
    wheel = wheels / build.stdout.split()[-1]
    python = _other_venv(tmp_path)
    (site_packages,) = (python.parent.parent / "lib").glob("python3*/site-packages")
    with zipfile.ZipFile(wheel) as z:
        assert HOOK_PTH in z.namelist()  # at the wheel's root: site-packages
        z.extractall(site_packages)
    (site_packages / "zz-test-deps.pth").write_text("".join(p + "\n" for p in sys.path if p and os.path.isdir(p)))
    (site_packages / "sitecustomize.py").write_text("import sys\n"
                                                    "sys.sitecustomized = getattr(sys, 'sitecustomized', 0) + 1\n")
    return python


def test_the_program_sees_the_environment_and_sys_path_of_a_plain_run(tmp_path):
    """Issue 39: ``stepscope run`` put a folder on every program's ``PYTHONPATH`` (so on its ``sys.path``) to follow
    its processes. Installed, stepscope follows them by its start-up hook (``stepscope-follow.pth`` in site-packages):
    the program and its processes see the PYTHONPATH and sys.path of a plain run, and one variable of stepscope's
    (``STEPSCOPE_FOLLOW``); the environment's own ``sitecustomize`` runs once in each; they are still recorded.
    Without the variable, the hook imports nothing."""
    python = _installed_env(tmp_path)
    (tmp_path / "seeing.py").write_text(SEEING)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE"))}
    env["STEPSCOPE_STORE"] = str(tmp_path / "store")
    idle = subprocess.run([str(python), "-c", "import sys; print(sorted(m for m in sys.modules if 'stepscope' in m))"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert idle.stdout == "[]\n", idle.stderr
    plain = subprocess.run([str(python), "seeing.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
    traced = subprocess.run([str(python), "-m", "stepscope", "run", "-q", "-t", "seeing.work", "-t", "__main__.work",
                             "--", str(python), "seeing.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert (traced.returncode, traced.stderr) == (plain.returncode, plain.stderr) == (0, "")
    seen_plain = [json.loads(ln) for ln in plain.stdout.splitlines()]
    seen_traced = [json.loads(ln) for ln in traced.stdout.splitlines()]
    assert [(s["who"], s["sitecustomize"]) for s in seen_plain] == [("top", 1), ("subprocess", 1), ("spawn", 1)]
    for a, b in zip(seen_plain, seen_traced, strict=True):
        assert (b["who"], b["PYTHONPATH"], b["path"], b["sitecustomize"]) == (a["who"], a["PYTHONPATH"], a["path"], 1)
        assert sorted(set(b["env"]) - set(a["env"])) == ["STEPSCOPE_FOLLOW"] and set(a["env"]) <= set(b["env"])
    st = Store(tmp_path / "store")
    try:
        (top,) = st.list_runs()
        kids = [k for k in st.process_runs(top.id) if "resource_tracker" not in " ".join(k.command)]
        assert sorted((k.process["how"], k.status) for k in kids) == [("exec", "ok")] * 2
        data = load_run(st)
    finally:
        st.close()
    assert {"__main__.work", "seeing.work"} <= {sp.name for sp in data.spans}
