"""The sampler's C stack walk (stepscope/record/native/stackwalk.c, issue 41) against its Python walk: the same stacks
for the same threads (nested functions, a generator, a coroutine under asyncio, a recursion beyond max_depth, a thread
inside time.sleep, frames of a hidden file) on this interpreter and on pyenv's 3.12 and 3.13 with PYTHONPATH=src, no
frame object made by a C look, STEPSCOPE_SAMPLER=python for the Python walk, code objects kept until a reset."""

import gc
import json
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

from stepscope.record import native
from stepscope.record.sampling.sampler import HIDDEN_FILES, Sampler, walk_choice

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "stackwalk_same.py"
BUILD_NATIVE = ROOT / "scripts" / "build_native.py"

needs_walker = pytest.mark.skipif(native.ext is None or not hasattr(native.ext, "Walker"),
                                  reason="no C stack walk on this interpreter")


def _interpreters():
    out = [pytest.param(sys.executable, id=f"py{sys.version_info[0]}.{sys.version_info[1]}")]
    for version, exe in (("3.12.1", "python3.12"), ("3.13.0", "python3.13")):
        venv = ROOT / f".venv-{exe[len('python'):]}" / "bin" / "python"
        path = Path.home() / ".pyenv" / "versions" / version / "bin" / exe
        if venv.exists() or path.exists():
            out.append(pytest.param(str(venv if venv.exists() else path), id=exe))
    return out


@pytest.mark.parametrize("python", _interpreters())
def test_the_c_walk_reads_the_stacks_the_python_walk_reads(python):
    subprocess.run([python, str(BUILD_NATIVE), "--quiet"], capture_output=True, timeout=300)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([python, str(PROGRAM)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    if "skip" in out:
        pytest.skip(out["skip"])
    for depth in (256, 16):
        c, py = out[f"c-{depth}"], out[f"python-{depth}"]
        assert (c["walk"], py["walk"]) == ("c", "python")
        assert c["stacks"] == py["stacks"], depth
        assert c["truncated"] == py["truncated"]
        assert c["again"] and py["again"]  # a thread that waited since is recorded again on the same stack
        for k in ("first_charges", "again_charges", "t_in_look"):  # each thread's accounting: C (threads.c), Python
            assert c[k] and py[k], (k, depth)
        assert c["own"] == py["own"]  # the signal handler's read of its own thread (``Walker.walk``)
    assert [f[0] for f in out["c-256"]["own"]][-3:] == ["own_stack"] * 3
    assert "own_gen" in [f[0] for f in out["c-256"]["own"]]
    assert len(out["c-16"]["own"]) == 16
    stacks = {name: [f[0] for f in stack] for name, stack in out["c-256"]["stacks"].items()}
    assert stacks["nested"][-5:] == ["nested_a", "nested_b", "nested_c", "Event.wait", "Condition.wait"]
    assert stacks["generator"][-4:] == ["gen_user", "gen_body", "Event.wait", "Condition.wait"]
    assert stacks["coroutine"][-4:] == ["main_coro", "inner_coro", "Event.wait", "Condition.wait"]
    assert "BaseEventLoop.run_until_complete" in stacks["coroutine"]
    assert stacks["sleeper"][-1] == "sleeper"  # (time.sleep: a C call, the Python line that called it)
    assert stacks["runpy"][-5:] == ["by_runpy", "<module>", "scripted", "Event.wait", "Condition.wait"]
    assert not any("runpy" in f[2] for f in out["c-256"]["stacks"]["runpy"])  # HIDDEN_FILES: left out
    assert stacks["deep"].count("deep") == 61
    deep16 = [f[0] for f in out["c-16"]["stacks"]["deep"]]
    assert deep16 == ["deep"] * 14 + ["Event.wait", "Condition.wait"]  # the frames nearest the leaf
    assert out["c-16"]["truncated"] >= 1
    # no frame object: 20 C looks at a thread whose stack the walker knows allocate (almost) nothing, where reading
    # that thread's frames once (sys._current_frames, f_back) makes one object a frame
    alloc = out["alloc"]
    assert alloc["unseen"] == 0 and alloc["c_look"] < 5 <= alloc["depth"] <= alloc["python_walk"], alloc


def test_stepscope_sampler_python_chooses_the_python_walk(monkeypatch):
    monkeypatch.setenv("STEPSCOPE_SAMPLER", "python")
    s = Sampler()
    assert (s.walk, s.walk_note) == ("python", "STEPSCOPE_SAMPLER=python") and s._walker is None
    assert walk_choice() == ("python", "STEPSCOPE_SAMPLER=python")
    with pytest.raises(RuntimeError, match="STEPSCOPE_SAMPLER"):
        Sampler(walk="c")
    assert s.sample(exclude_thread=-1) >= 1  # (the caller's own thread)
    monkeypatch.delenv("STEPSCOPE_SAMPLER")
    if native.ext is not None and hasattr(native.ext, "Walker"):
        assert Sampler().walk == "c" and Sampler().walk_note is None
    else:
        assert Sampler().walk == "python" and Sampler().walk_note


@needs_walker
def test_a_thread_that_waited_is_recorded_again_unwalked():
    ev, ready = threading.Event(), threading.Event()

    def parked():
        ready.set()
        ev.wait()

    th = threading.Thread(target=parked)
    th.start()
    ready.wait()
    time.sleep(0.05)
    try:
        s = Sampler(walk="c")
        s.sample()
        assert th.ident in s.ran
        time.sleep(0.02)
        s.sample()
        assert th.ident not in s.ran  # its CPU clock stood still: not walked
        frames, stacks, samples = s.drain()
        mine = [x for x in samples if x[1] == th.ident]
        assert len(mine) == 2 and mine[0][2] == mine[1][2] and mine[1][3] >= 20_000_000
        assert [frames[i][0] for i in stacks[mine[0][2]]][-2:] == ["Event.wait", "Condition.wait"]
    finally:
        ev.set()
        th.join()


@needs_walker
def test_the_walker_keeps_each_code_until_reset():
    ns = {}
    exec(compile("def parked(ready, ev):\n    ready.set()\n    ev.wait()\n", "<walked>", "exec"), ns)
    code = weakref.ref(ns["parked"].__code__)
    ev, ready = threading.Event(), threading.Event()
    th = threading.Thread(target=ns.pop("parked"), args=(ready, ev))
    th.start()
    ready.wait()
    time.sleep(0.05)
    w = native.ext.Walker(256, HIDDEN_FILES)
    seen = w.look({threading.get_ident()})
    assert seen[th.ident] >= 0 and seen[threading.get_ident()] == -1 and w.unseen
    frames, stacks = w.take()
    assert w.unseen == 0 and any(f[0] is code() and f[1] == 3 and f[2] == "" for f in frames)
    ev.set()
    th.join()
    del frames, th
    gc.collect()
    assert code() is not None  # kept: its address cannot be reused while the walker may meet it
    w.reset()
    gc.collect()
    assert code() is None
    assert w.take() == ([], [])


@needs_walker
def test_rows_and_stacks_made_while_they_are_handed_over_wait_for_the_next_call():
    """rows() and take() allocate a tuple per item; on 3.11 an allocation may run the garbage collector and its
    Python code, which can hand the GIL to the main thread, whose C signal handler then adds samples and stacks (and
    may move the walker's arrays) in the middle of the hand-over. Those wait for the next call: none is lost, and the
    list handed over is never written past its end (the heap corruption this caused: a recorded program's abort)."""
    w = native.ext.Walker(64, HIDDEN_FILES)
    made = [0]  # rows recorded (a row a thread with a Python frame, each look)
    for _ in range(50):
        made[0] += w.sample([], 10_000_000, 100_000_000)[2]
    before = made[0]
    fired = {"rows": 0, "take": 0}
    inside = {"now": None}

    def more(phase, info):  # the handler's work, done by the collector's Python code in the middle of the call
        if phase == "start" and inside["now"] is not None and fired[inside["now"]] < 3:
            fired[inside["now"]] += 1
            for _ in range(100):
                made[0] += w.sample([], 10_000_000, 100_000_000)[2]
            ns = {}
            exec(compile(f"def fresh_{inside['now']}_{fired[inside['now']]}(w):\n    return w.walk(__import__('sys')"
                         "._getframe())\n", "<fresh>", "exec"), ns)
            ns.popitem()[1](w)  # a new code: a new frame and stack for take()

    threshold = gc.get_threshold()
    gc.callbacks.append(more)
    gc.set_threshold(1)
    try:
        inside["now"] = "rows"
        first = w.rows()
        inside["now"] = "take"
        frames, stacks = w.take()
        inside["now"] = None
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(more)
    if sys.version_info < (3, 12):  # (3.12+ runs the collector at the next bytecode boundary, not in an allocation)
        assert fired["rows"] and fired["take"]
    rest = w.rows()
    assert len(first) + len(rest) == made[0]
    assert len(first) >= before and all(isinstance(r, tuple) and len(r) == 5 for r in first + rest)
    frames2, stacks2 = w.take()
    keys = [(id(f[0]), f[1]) for f in frames + frames2]  # (a frame: a code at a line; the walker keeps the codes)
    assert len(set(keys)) == len(keys)  # each frame handed over once
    assert sum(f[0].co_name.startswith("fresh_") for f in frames + frames2) == fired["rows"] + fired["take"]
    assert w.unseen == 0 and w.take() == ([], [])
    n_stacks = len(stacks) + len(stacks2)
    assert all(s < n_stacks for r in first + rest for s in [r[2]])


@pytest.mark.parametrize("walk", [pytest.param("c", marks=needs_walker), "python"])
def test_a_thread_that_moves_within_its_slack_is_walked_but_not_listed_as_run(walk):
    """A thread with slack (the resting main thread, ``hand_over``) that runs a few us between two waits: the look
    reads its new stack (each wait charged at its own) and counts it as moved, not as run (no wake) until it has used
    its slack; one that has not moved is recorded again unwalked."""
    from conftest import wait_until

    ev1, ev2, ready = threading.Event(), threading.Event(), threading.Event()

    def first_wait():
        ready.set()
        ev1.wait()

    def second_wait():
        ev2.wait()

    th = threading.Thread(target=lambda: (first_wait(), second_wait()))
    th.start()
    ready.wait()
    try:
        wait_until(lambda: any("first_wait" in str(f.f_code) for f in _chain(th.ident)), 10, "the first wait")
        s = Sampler(walk=walk)
        s.sample()
        assert th.ident in s.ran
        if walk == "c":
            t, cpu, stack = s._walker.forget(th.ident, False)
            s._walker.hand_over(th.ident, th.native_id, t, cpu, stack, 10**12)
        else:
            s.slack[th.ident] = 10**12
        wait_until(lambda: (s.sample(), th.ident not in s.ran and s.moved == 0)[1], 10,
                   "a look at which it had not moved (recorded again)")  # (it may still be entering its wait)
        ev1.set()
        wait_until(lambda: any("second_wait" in str(f.f_code) for f in _chain(th.ident)), 10, "the second wait")
        s.sample()
        assert th.ident not in s.ran and s.moved == 1
        frames, stacks, samples = s.drain()
        mine = [x for x in samples if x[1] == th.ident]
        names = [[frames[i][0] for i in stacks[x[2]]] for x in mine]
        assert any(n.endswith("first_wait") for n in names[0]) and any(n.endswith("second_wait") for n in names[-1])
    finally:
        ev1.set()
        ev2.set()
        th.join()


def _foreign(*ours) -> set:
    """The ids of the threads with a Python frame but ``ours`` (threads.Thread): left out of a test's looks, so that
    another test's threads still running in this process (a server's, a pool's) do not move under it."""
    keep = {t.ident for t in ours}
    return {tid for tid in sys._current_frames() if tid not in keep}


def _still_look(s, *ours) -> list:
    """Looks (``ours`` only) until one at which none of them had run, followed at once by an ``unmoved`` check that
    holds (a thread of another test's that came or went in between: again); that look's rows."""
    from conftest import wait_until

    got = []

    def once():
        s.sample(skip=_foreign(*ours))
        rows = s.drain()[2]
        if not s.ran and s.unmoved():
            got.append(rows)
            return True
        return False

    wait_until(once, 10, "a look at which none had run, and a check after it")
    return got[0]


def _chain(tid: int) -> list:
    """The frames of thread ``tid``'s stack, innermost first."""
    f, out = sys._current_frames().get(tid), []
    while f is not None:
        out.append(f)
        f = f.f_back
    return out


@pytest.mark.parametrize("walk", [pytest.param("c", marks=needs_walker), "python"])
def test_a_check_without_rows_charges_a_thread_that_ends_before_the_next_look(walk):
    """``Sampler.unmoved`` (a resting recorder's look): True while no thread has run since the last look, and no row
    made; once a thread runs, False. A thread that ends after such a check and before the next look is charged at its
    stack until the check (not dropped with its time since its last row), each thread's rows adding up."""
    from conftest import wait_until

    ev, go, ready = threading.Event(), threading.Event(), threading.Event()

    def parked():
        ready.set()
        ev.wait()

    def leaving():
        go.wait()

    stay = threading.Thread(target=parked)
    stay.start()
    ready.wait()
    ends = threading.Thread(target=leaving)
    ends.start()
    try:
        wait_until(lambda: any("leaving" in str(f.f_code) for f in _chain(ends.ident))
                   and any("parked" in str(f.f_code) for f in _chain(stay.ident)), 10, "both waiting")
        s = Sampler(walk=walk)
        before = _still_look(s, stay, ends)
        checked = time.perf_counter_ns()
        t_look = max(x[0] for x in before)
        assert s.drain()[2] == []  # (no row)
        go.set()
        ends.join()
        assert not s.unmoved()  # (a thread ended: the count of threads changed)
        s.sample(skip=_foreign(stay))
        _, _, rows = s.drain()
        gone = [x for x in rows if x[1] == ends.ident]
        assert len(gone) == 1 and t_look < gone[0][0] <= checked, (gone, t_look, checked)
        assert gone[0][3] == gone[0][0] - t_look  # (charged from its last row until the check)
        kept = [x for x in rows if x[1] == stay.ident]
        assert len(kept) == 1 and kept[0][3] == kept[0][0] - t_look  # (the whole time since its last row)
    finally:
        ev.set()
        go.set()
        stay.join()
        ends.join()


@pytest.mark.parametrize("walk", [pytest.param("c", marks=needs_walker), "python"])
def test_runs_between_waits_within_the_idle_share_of_a_cpu_count_as_idle(walk):
    """``Sampler.idle``: a look at which threads ran counts as idle when what they used since their previous rows is
    within 1% of the time (an event loop's timer, a heartbeat: a thread that runs a few us between two waits), not
    when one ran for real (30 ms of CPU), nor when a thread was seen for the first time."""
    from conftest import wait_until

    evs = [threading.Event() for _ in range(3)]
    ready = threading.Event()

    def spin(ns):
        end = time.thread_time_ns() + ns
        while time.thread_time_ns() < end:
            pass

    def body():
        ready.set()
        evs[0].wait()
        evs[1].wait()  # (a few us between the two waits)
        spin(30_000_000)
        evs[2].wait()

    th = threading.Thread(target=body)
    th.start()
    ready.wait()
    try:
        wait_until(lambda: any(f.f_code.co_name == "body" for f in _chain(th.ident)), 10, "the first wait")
        s = Sampler(walk=walk)
        s.sample(skip=_foreign(th))
        assert th.ident in s.ran and not s.idle(time.perf_counter_ns())  # (a thread seen for the first time)
        wait_until(lambda: (s.sample(skip=_foreign(th)), not s.ran)[1], 10, "a look at which it had not run")
        assert s.idle(time.perf_counter_ns())  # (nothing ran)
        time.sleep(0.2)  # (an allowance of at least 1 ms: 1% of the time since)
        evs[0].set()
        wait_until(lambda: th.ident in (s.sample(skip=_foreign(th)), s.ran)[1], 10, "its move")
        assert s.idle(time.perf_counter_ns())  # (a few us of CPU between two waits)
        cpu0 = time.clock_gettime_ns(time.pthread_getcpuclockid(th.ident))
        evs[1].set()
        wait_until(lambda: time.clock_gettime_ns(time.pthread_getcpuclockid(th.ident)) - cpu0 >= 30_000_000, 10,
                   "its 30 ms of CPU")
        s.sample(skip=_foreign(th))
        assert th.ident in s.ran and not s.idle(time.perf_counter_ns())
    finally:
        for ev in evs:
            ev.set()
        th.join()


@needs_walker
def test_a_lazy_look_leaves_rows_of_threads_back_at_their_stack_for_later_with_their_cpu():
    """``sample(lazy=True)`` (a resting recorder's look): a thread that has not run since the last look gets no row,
    nor one that ran and is back at the stack of its last row (an event loop's timer); the next row of each is
    charged the whole time since its last one, with the CPU it used meanwhile. A thread that moved to another stack
    is walked and recorded."""
    from conftest import wait_until

    go, other, stop = threading.Event(), threading.Event(), threading.Event()
    rounds = []

    def spin(ns):
        end = time.thread_time_ns() + ns
        while time.thread_time_ns() < end:
            pass

    def looping():
        while not stop.is_set():
            go.wait()
            go.clear()
            spin(2_000_000)
            rounds.append(1)

    def elsewhere():
        other.wait()

    def moving():
        go2.wait()
        elsewhere()

    go2 = threading.Event()
    a = threading.Thread(target=looping)
    b = threading.Thread(target=moving)
    a.start()
    b.start()

    def at(th, name):
        return any(f.f_code.co_name == name for f in _chain(th.ident)) and _chain(th.ident)[0].f_code.co_name == "wait"

    try:
        wait_until(lambda: at(a, "looping") and at(b, "moving"), 10, "both waiting")
        s = Sampler(walk="c")
        s.sample(skip=_foreign(a, b))
        frames, stacks, first = s.drain()
        t1 = {x[1]: x[0] for x in first}
        wait_until(lambda: (s.sample(skip=_foreign(a, b), lazy=True), s._walker.deferred == 2 and not s.ran)[1], 10,
                   "a lazy look, none ran")
        assert s.drain()[2] == []
        go.set()
        wait_until(lambda: rounds and at(a, "looping"), 10, "a's run, back at its wait")
        go2.set()
        wait_until(lambda: at(b, "elsewhere"), 10, "b at its other wait")
        s.sample(skip=_foreign(a, b), lazy=True)
        assert a.ident in s.ran and b.ident in s.ran and s._walker.deferred == 1
        more_frames, more_stacks, rows = s.drain()
        frames, stacks = frames + more_frames, stacks + more_stacks
        # (b moved to another stack: walked and recorded, its wait at the old stack and its run at the new one)
        assert {x[1] for x in rows} == {b.ident} and sum(x[3] for x in rows) == rows[-1][0] - t1[b.ident], rows
        names = [frames[i][0] for i in stacks[rows[-1][2]]]
        assert any(n.endswith("elsewhere") for n in names), names
        s.sample(skip=_foreign(a, b))
        _, _, rows = s.drain()
        ra = [x for x in rows if x[1] == a.ident]
        assert len(ra) == 1 and ra[0][3] == ra[0][0] - t1[a.ident] and ra[0][4] >= 2_000_000, (ra, t1)
    finally:
        stop.set()
        go.set()
        go2.set()
        other.set()
        a.join()
        b.join()


@needs_walker
def test_a_walkers_codes_are_held_for_the_next_walker_after_a_sessions_end(tmp_path):
    """A look without the GIL and a busy thread's own timer read only frames whose code the walker holds, and a new
    walker learned each code again from a miss: a server's capture windows, one session after another, paid those
    misses (and the looks with the GIL they cost) in each. A session's end now hands its walker's codes to the
    process's next walker (``Walker.reset(True)``, ``Sampler.hand_on``), hidden by that walker's own files; only one
    carry is kept (a walker made while another holds none takes nothing), and a plain ``reset`` releases them."""
    from conftest import wait_until

    import stepscope.record.api as api
    from stepscope.record.settings import Settings

    stop = threading.Event()

    def carried_code_runs_here():
        stop.wait()  # (blocked in this frame until the test ends: its code is what the walkers hold)

    th = threading.Thread(target=carried_code_runs_here)
    th.start()
    try:
        native.ext.Walker(64, HIDDEN_FILES).reset()  # (takes any carry an earlier test left, and releases it)
        a = native.ext.Walker(64, HIDDEN_FILES)
        a.look(())
        n = a.codes
        assert n > 0
        a.reset(True)
        assert a.codes == 0
        b = native.ext.Walker(64, HIDDEN_FILES)
        c = native.ext.Walker(64, HIDDEN_FILES)  # (b took them: none left for c)
        assert (b.codes, c.codes) == (n, 0)
        ids = b.look(())  # (the carried codes serve b's look: the same stack as a's)
        assert ids[th.ident] >= 0 and b.codes == n, (ids, b.codes, n)
        b.reset()
        assert native.ext.Walker(64, HIDDEN_FILES).codes == 0
        api.start(Settings(profiles_hz=101, memory=False, store=str(tmp_path / "store")))
        wait_until(lambda: api._session.sampler._walker.codes > 0, 10, "the session's looks")
        api.shutdown()
        assert native.ext.Walker(64, HIDDEN_FILES).codes > 0  # (the session's end handed them on)
    finally:
        stop.set()
        th.join()
