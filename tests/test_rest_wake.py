"""A resting recorder and the spans that start while it rests (``cpuwake``, ``_native.call_wake``).

The recorder rests once no thread has run for a while (a main thread waiting on subprocesses, a server between
requests); a step loop that then mostly waits (sleeps, device syncs) uses too little CPU to wake it by the process's
CPU clock. The first span to start (a traced call, C-recorded or not, or a ``stepscope.span``) wakes it, and the
steps are sampled at the full rate: ``explain`` names the function the slow steps wait in.
"""

from __future__ import annotations

import sys

import pytest
from conftest import run_cli, wait_until

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


def test_a_wait_ends_where_the_span_that_woke_the_resting_recorder_began():
    """The recorder's look after a span woke it may come late (a loaded machine): the wait of the thread that started
    the span is charged at its wait's stack only until the span began (``_native.last_call_wake``), not until a
    period before the look (the step's own sleep read as the wait's, before the step: test above, under load)."""
    import threading
    import time

    from stepscope.record import native
    from stepscope.record.sampling.sampler import HIDDEN_FILES

    if native.ext is None or not hasattr(native.ext, "Walker") or not sys.platform.startswith("linux"):
        pytest.skip("the C walker on Linux")
    release, done = threading.Event(), threading.Event()

    def waiter():
        release.wait()
        native.ext.next_id()  # a span starts (stepscope.span's first step): it fires the armed wake
        time.sleep(0.05)  # the step's own wait, ~no CPU
        done.wait()

    th = threading.Thread(target=waiter)
    th.start()
    ms = 1_000_000
    try:
        skip = set(sys._current_frames()) - {th.ident}
        w = native.ext.Walker(64, HIDDEN_FILES)
        wait_until(lambda: sys._current_frames()[th.ident].f_code.co_name == "wait", 10,
                   "the thread blocked in release.wait")  # (the program's own wait)
        w.sample(skip, 10 * ms, 30 * ms)
        first = [r for r in w.rows() if r[1] == th.ident]
        time.sleep(0.3)  # (the program's wait: longer than the cap, so its gap is split at the next look)
        before = native.ext.last_call_wake()
        native.ext.call_wake(999_999)  # a resting recorder's wake, armed (no such timer: nothing expires)
        release.set()
        wait_until(lambda: native.ext.last_call_wake() != before, 10, "the span's start, which fires the wake")
        time.sleep(0.06)  # (what is tested: a look that comes ~50 ms after the span began, th in its step's sleep)
        woke = native.ext.last_call_wake()
        w.sample(skip, 10 * ms, 30 * ms)
        rows = [r for r in w.rows() if r[1] == th.ident]
    finally:
        native.ext.call_wake(-1)
        release.set()
        done.set()
        th.join()
    assert len(first) == 1 and woke is not None and woke[1] == th.ident, (first, woke)
    wait = [r for r in rows if r[2] == first[0][2]]
    run = [r for r in rows if r[2] != first[0][2]]
    assert len(wait) == 1 and len(run) == 1, rows
    assert first[0][0] < wait[0][0] <= woke[0], (first, wait, woke)  # the wait ends where the span began
    assert run[0][3] >= run[0][0] - woke[0] - 1 and run[0][3] > 40 * ms, (run, woke)  # the step's sleep: the run's
