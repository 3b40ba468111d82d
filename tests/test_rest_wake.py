"""A resting recorder and the spans that start while it rests (``cpuwake``, ``_native.call_wake``).

The recorder rests once no thread has run for a while (a main thread waiting on subprocesses, a server between
requests); a step loop that then mostly waits (sleeps, device syncs) uses too little CPU to wake it by the process's
CPU clock. The first span to start (a traced call, C-recorded or not, or a ``stepscope.span``) wakes it, and the
steps are sampled at the full rate: ``explain`` names the function the slow steps wait in.
"""

from __future__ import annotations

import sys

import pytest
from conftest import run_cli

from stepscope.analysis.calltree import ProfileIndex
from stepscope.analysis.explain import explain
from stepscope.store.db import Store
from stepscope.store.reader import load_run

LOOP = '''\
import threading
import time
{imports}

def costly():
    time.sleep(0.1)


def step(i):
    time.sleep(0.02)
    if i % 4 == 3:
        costly()


threading.Event().wait(1.5)  # (a wait long enough for the recorder to rest)
for i in range(12):
    {call}
'''

CASES = {
    "traced function": ("", "step(i)", ["-t", "__main__.step", "-t", "__main__.costly"]),
    "stepscope.span": ("import stepscope", "with stepscope.span('__main__.step'):\n        step(i)",
                       ["-t", "__main__.costly"]),
}


def _under(index, name: str):
    import numpy as np

    fid = {i for i, f in enumerate(index.functions) if f.name == name}
    return np.array([any(f in fid for f in index.stack_funcs[s]) for s in index.stack])


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_span_that_starts_wakes_the_resting_recorder_and_its_steps_are_sampled(tmp_path, case):
    imports, call, traces = CASES[case]
    prog = tmp_path / "prog.py"
    prog.write_text(LOOP.format(imports=imports, call=call))
    store = tmp_path / "s"
    r = run_cli(["run", "-q", "--hz", "499", *traces, "--", sys.executable, str(prog)], store, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stderr
    st = Store(store)
    try:
        data = load_run(st)
    finally:
        st.close()
    info = data.run.env["sampler"]
    if "idle_rests" not in info:
        pytest.skip(f"the recorder rests on Linux with the C extension only: {info}")
    assert info.get("idle_woken_by_call", 0) >= 1, info
    index = ProfileIndex(data.profile)
    main = index.thread == next(t for t, n in data.profile.thread_names.items() if n == "MainThread")
    steps = [s for s in data.spans if s.name == "__main__.step"]
    assert len(steps) == 12
    inside = main & (index.t >= steps[0].start_ns) & (index.t <= steps[-1].end_ns + 5_000_000)
    costly = float(index.weight[inside & _under(index, "__main__.costly")].sum())
    rest = float(index.weight[inside & ~_under(index, "__main__.costly")].sum())
    assert 0.25e9 < costly < 0.4e9, costly  # (3 x 100 ms)
    assert 0.18e9 < rest < 0.4e9, rest  # (12 x 20 ms)
    e = explain(data, index=index)
    assert e.unit == "__main__.step" and e.enough_samples, e.advice
    assert [c.function for c in e.causes][:1] == ["__main__.costly"] or e.entry.function == "__main__.costly", \
        (e.causes, e.entry)
