"""The main thread's timer-signal handler (issue 41): the C one (``_native.tick``, record/native/sigtick.c) and its
Python fallback (``sampling.signals._handler``) keep the same rules on the same state. Each test drives the installed
handler by hand, as CPython calls it (signal number, the running frame), in a session whose own timers are too slow
to tick meanwhile (1 Hz)."""

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from stepscope.record import api, native
from stepscope.record.sampling import signals
from stepscope.record.settings import Settings

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the timer-signal sampler is Linux's")

HANDLERS = ["c", "python"] if getattr(native.ext, "tick", None) is not None else ["python"]


@pytest.fixture(params=HANDLERS)
def main(request, monkeypatch, tmp_path):
    """The active main-thread sampler of a 1 Hz session, with the handler asked for."""
    if request.param == "python":
        monkeypatch.setenv("STEPSCOPE_SAMPLER", "python")
    api.start(Settings(profiles_hz=1, memory=False, store=str(tmp_path / "store")))
    try:
        s = signals._active
        assert s is not None and s.active and s.handler == request.param
        yield s
    finally:
        api.shutdown()


def _rows(s):
    return [r for r in s.sampler.drain()[2] if r[1] == threading.main_thread().ident]


def _here():
    return sys._getframe(1)


def test_a_late_tick_is_charged_every_wait_scheduled_up_to_it(main):
    h = signals.HANDLER
    _rows(main)
    interval, waited = 7_000_000, 3_000_000
    main.interval, main.waited, main.left, main.carry = interval, waited, 8, 0
    due = time.perf_counter_ns() - 2 * interval - 1_000_000  # three expirations have passed: due, +1, +2 intervals
    main.due = due
    h(main.signum, _here())
    rows = _rows(main)
    assert [r[3] for r in rows] == [waited + 2 * interval], rows
    assert rows[0][4] == 0  # a wall tick carries no CPU time
    assert (main.due, main.left, main.waited) == (due + 3 * interval, 5, interval)
    h(main.signum, _here())  # nothing due yet: a spurious tick records nothing
    assert _rows(main) == []


def test_the_block_ends_with_a_new_interval_drawn(main):
    h = signals.HANDLER
    main.interval, main.waited, main.left = 5_000_000, 5_000_000, 1
    main.due = time.perf_counter_ns() - 1
    t = time.perf_counter_ns()
    h(main.signum, _here())
    assert main.left == signals.BLOCK
    assert 0.5 * main.period_ns <= main.interval < 1.5 * main.period_ns
    # the kernel timer re-armed on that schedule: its next expiration at the pending one, then every new interval
    # (the session's first timer has the kernel's id 0, which ctypes reads as None: it must still be re-armed)
    left, interval = main.wall_timer.gettime()
    assert interval == main.interval
    assert abs((t + left) - main.due) < 50_000_000, (left, main.due - t)


def test_a_cpu_tick_is_charged_the_cpu_time_since_the_previous(main):
    h = signals.HANDLER
    _rows(main)
    main.cpu_last = c0 = time.thread_time_ns()
    x = 0
    for i in range(200_000):  # some CPU time
        x += i
    h(main._signums[1], _here())
    c1 = time.thread_time_ns()
    rows = _rows(main)
    assert len(rows) == 1 and rows[0][3] == 0 and 0 < rows[0][4] <= c1 - c0, (rows, c1 - c0)
    main.cpu_last = time.thread_time_ns() + 10**9  # no CPU time used since: no sample
    h(main._signums[1], _here())
    assert _rows(main) == []


def test_quiet_ticks_rest_the_main_thread(main):
    h = signals.HANDLER
    main.quiet_ticks = main.quiet_cpu = 0
    main.tick_cpu_q = -1
    for k in range(60):
        main.due = time.perf_counter_ns() - 1
        h(main.signum, _here())
        if main.resting:
            break
    assert main.resting and main.rests == 1 and k >= 10, (k, main.rests)
    main.due = time.perf_counter_ns() - 1  # a resting main thread's wall ticks record nothing
    _rows(main)
    h(main.signum, _here())
    assert _rows(main) == []


def test_a_tick_while_the_program_profiles_pauses_sampling(main, monkeypatch):
    h = signals.HANDLER
    # (the recorder thread may finish the pause itself meanwhile, and resumes once it sees no other tool: a
    # setprofile of this thread's is not one it sees from its own, so it is told there is one)
    monkeypatch.setattr(signals, "other_tools", lambda: True)
    sys.setprofile(lambda *a: None)
    try:
        main.due = time.perf_counter_ns() - 1
        h(main.signum, _here())
        assert main.paused and not main.active
        main.check()  # the recorder finishes the pause: the timers closed
        assert main._timers == [] and main.pauses == 1
    finally:
        sys.setprofile(None)


def test_a_pause_for_the_main_threads_own_setprofile_lasts_until_it_is_removed(main):
    """A ``sys.setprofile`` of the main thread's own is Python-visible to that thread alone: the recorder thread reads
    it in C (``_native.thread_hooked``), so it neither resumes sampling while it is set (a pause and a resume at every
    tick before) nor keeps the pause once it is gone (3.12+, where a pause can end)."""
    if getattr(native.ext, "thread_hooked", None) is None:
        pytest.skip("the C extension is not built")
    h = signals.HANDLER
    seen = []
    sys.setprofile(lambda *a: None)
    try:
        other = threading.Thread(target=lambda: seen.append(native.ext.thread_hooked(threading.main_thread().ident)))
        other.start()
        other.join()
        assert seen == [True] and not native.ext.thread_hooked(other.ident)
        main.due = time.perf_counter_ns() - 1
        h(main.signum, _here())
        assert main.paused and not main.active
        for _ in range(3):  # (the recorder thread checks too, as often as it likes)
            main.check()
        assert main.paused and main.pauses == 1 and main._timers == []
    finally:
        sys.setprofile(None)
    assert not native.ext.thread_hooked(threading.main_thread().ident)
    if not main.resumable:  # (3.11: another thread's tracer cannot be seen from Python: the pause lasts the run)
        return
    deadline = time.monotonic() + 10
    while not main.active and time.monotonic() < deadline:
        main.check()
    assert main.active and not main.paused and main.pauses == 1


def test_the_span_open_at_a_wall_tick_is_kept(main):
    from stepscope.record.spans.buffer import current_span

    h = signals.HANDLER
    rec = ["a record"]
    token = current_span.set(rec)
    try:
        main.due = time.perf_counter_ns() - 1
        h(main.signum, _here())
    finally:
        current_span.reset(token)
    assert main.current is rec


def test_no_tick_after_the_session_ends(tmp_path):
    api.start(Settings(profiles_hz=1, memory=False, store=str(tmp_path / "store")))
    s = signals._active
    api.shutdown()
    assert signals._active is None and not s.active
    s.due = 0
    signals.HANDLER(s._signums[0], _here())  # a signal still pending after the end: nothing happens
    assert s.sampler.drain()[2] == []


@pytest.mark.parametrize("handler", HANDLERS)
def test_the_first_timer_of_a_process_is_re_armed_at_a_block_end(handler, tmp_path):
    """The first POSIX timer a process makes has the kernel's id 0 (which ctypes reads as a null pointer): the C handler
    must still re-arm it. In a fresh process, so that the session's wall timer is the first."""
    code = textwrap.dedent(f"""
        import os, sys, time
        if {handler!r} == "python":
            os.environ["STEPSCOPE_SAMPLER"] = "python"
        from stepscope.record import api
        from stepscope.record.sampling import signals
        from stepscope.record.settings import Settings
        api.start(Settings(profiles_hz=1, memory=False, store={str(tmp_path / "store")!r}))
        s = signals._active
        assert s.handler == {handler!r}
        s.interval, s.waited, s.left = 5_000_000, 5_000_000, 1
        s.due = time.perf_counter_ns() - 1
        t = time.perf_counter_ns()
        signals.HANDLER(s.signum, sys._getframe())
        left, interval = s.wall_timer.gettime()
        print(s.wall_timer.timer_id, interval == s.interval, abs(t + left - s.due) < 50_000_000)
        api.shutdown()
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "True", "True"], r.stdout
