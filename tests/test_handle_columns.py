"""``stepscope.profile`` in a plain process (issue 40): the run as an object, its columns as a pandas DataFrame and,
without pandas, as a dict of numpy arrays; a bad setting and a second recording are one-line errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

PROGRAM = textwrap.dedent("""
    import sys, time
    if "--no-pandas" in sys.argv:
        sys.modules["pandas"] = None  # (import pandas raises ImportError)
    import stepscope

    def work(i):
        time.sleep(0.02 if i != 3 else 0.1)  # (wide apart: a busy machine delays a wake-up by ms)

    with stepscope.profile(trace=["__main__.work"], store=sys.argv[1], label="columns") as run:
        for i in range(8):
            work(i)
    sp, st = run.spans, run.steps
    print(type(sp).__module__.split(".")[0], type(st).__module__.split(".")[0])
    print(list(sp.keys()) if hasattr(sp, "keys") else list(sp.columns))
    print([int(x) for x in st["step"]], bool(st["slow"][3]))
    print(int(min(sp["duration_ns"])) > 15_000_000, int(max(sp["start_ns"])) < int(run.data.run.end_ns - run.data.run.start_ns))
    try:
        stepscope.profile(hz=-5)
    except ValueError as e:
        print("ValueError:", e)
    try:
        stepscope.profile(colour="red")
    except ValueError as e:
        print("ValueError:", str(e).split(" (")[0])
    with stepscope.profile(store=sys.argv[1]) as outer:
        try:
            with stepscope.profile(store=sys.argv[1]):
                pass
        except RuntimeError as e:
            print("RuntimeError:", str(e).split(";")[0].split(" run ")[0])
    print(outer.status, run.status)
""")


def _run(tmp_path, *args) -> list[str]:
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    p = subprocess.run([sys.executable, str(prog), str(tmp_path / "store"), *args], capture_output=True, text=True,
                       env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_columns_are_a_dataframe_with_pandas_and_numpy_arrays_without(tmp_path):
    import pytest

    pytest.importorskip("pandas")
    for args, kinds in (((), "pandas pandas"), (("--no-pandas",), "stepscope stepscope")):
        out = _run(tmp_path, *args)
        assert out[0] == kinds, out
        assert out[1] == "['id', 'parent', 'name', 'op', 'thread', 'start_ns', 'duration_ns', 'error', 'step']"
        assert out[2] == f"{list(range(8))} True", out  # the 100 ms repeat among 20 ms ones is slow
        assert out[3] == "True True"
        assert out[4] == "ValueError: hz: must be 0 (off) or between 0.01 and 10000, got -5"
        assert out[5] == "ValueError: stepscope.profile: no setting 'colour'"
        assert out[6] == "RuntimeError: stepscope is already recording"
        assert out[7] == "ok ok"
