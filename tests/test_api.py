"""The Python API in a program of the user's own (no `stepscope run`)."""

import json
import subprocess
import sys

from conftest import cli_env

from stepscope.store import Store
from stepscope.store.reader import load_run

PROGRAM = r'''
import time
import stepscope
from sstargets import funcs

stepscope.init(functions_to_trace=[{"qualified_name": "sstargets.funcs.outer"}, "sstargets.funcs.inner", "nope.nothing"],
               profiles_hz=199)
with stepscope.transaction("txt2img", op="function"):
    with stepscope.span("vae decode", step=1):
        funcs.outer(3)
        time.sleep(0.2)

@stepscope.trace
def later():
    return 5

print(later())
'''


def test_init_records_a_run_at_exit(store, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    r = subprocess.run([sys.executable, str(prog)], env=cli_env(store), cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "5\n"
    assert r.stderr.strip() == "stepscope: could not trace nope.nothing: module 'nope' was never imported"
    data = load_run(Store(store))
    by = {s.name: s for s in data.spans}
    assert by["vae decode"].parent_id == by["txt2img"].span_id and by["vae decode"].attrs == {"step": 1}
    assert by["sstargets.funcs.outer"].parent_id == by["vae decode"].span_id
    assert sum(1 for s in data.spans if s.name == "sstargets.funcs.inner") == 3
    assert "prog.later" in {s.name.replace("__main__", "prog") for s in data.spans}
    assert data.run.status == "ok" and len(data.profile) >= 20  # 0.2 s at 199 Hz
    assert data.run.settings["profiles_hz"] == 199


def test_second_init_is_refused(store, tmp_path):
    prog = tmp_path / "twice.py"
    prog.write_text("import stepscope\nstepscope.init()\ntry:\n    stepscope.init()\nexcept RuntimeError as e:\n"
                    "    print('refused:', str(e).split(';')[0])\nstepscope.shutdown()\nstepscope.init()\nprint('again ok')\n")
    r = subprocess.run([sys.executable, str(prog)], env=cli_env(store), cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("refused: stepscope is already recording run") and r.stdout.endswith("again ok\n")
    assert len(Store(store).list_runs()) == 2
