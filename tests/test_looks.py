"""The recorder's looks in one C call (``Walker.run``, record/native/looks.c): who samples the main thread is read
at each look, with the GIL held, from its timer sampler's state (``active``, ``resting``), so a rest or a wake that
comes while a run waits ends the run before any look reads the main thread twice (its own timers and the recorder
both) or not at all; a resting main thread that runs ends it; ``notify`` ends its wait."""

import collections
import sys
import threading
import time

import pytest
from conftest import wait_until
from test_stackwalk import needs_walker

from stepscope.record import native
from stepscope.record.sampling.sampler import HIDDEN_FILES

MS = 1_000_000


class _State:
    """A main thread sampler's state whose ``resting`` reads ``answers`` in turn (the last one from then on)."""

    def __init__(self, active: bool, *answers: bool):
        self.active = active
        self._answers = list(answers)
        self.reads = 0

    @property
    def resting(self) -> bool:
        self.reads += 1
        return self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]


@pytest.fixture
def spinner():
    """A thread that runs Python until the test ends: the stand-in for the program's main thread."""
    stop, ready = threading.Event(), threading.Event()

    def spin():
        ready.set()
        while not stop.is_set():
            sum(range(100))

    th = threading.Thread(target=spin)
    th.start()
    ready.wait()
    yield th
    stop.set()
    th.join()


def _run(w, main_ident: int, state, until_ms: float, period_ms: float = 1.0, lock=None, first_ms: float = 0,
         quiet: int = 0, quiet_looks: int = 1):
    held = lock or threading.Lock()
    if lock is None:
        held.acquire()  # (the session's lock: held while it records)
    now = time.perf_counter_ns()
    others = set(sys._current_frames()) - {main_ident}  # (the test's thread, and pytest-xdist's)
    return w.run(held, threading.Lock(), others, int(period_ms * MS), int(10 * period_ms * MS),
                 now + int(first_ms * MS),
                 now + int(until_ms * MS), main_ident, state, threading._active, -1, b"", collections.deque(), 10**9,
                 None, -1, 4096, 10**9, int(quiet * period_ms * MS), int(quiet_looks * period_ms * MS))


@needs_walker
def test_a_wake_that_comes_before_a_look_ends_the_run_unlooked(spinner):
    """The main thread rested when the run began (the recorder samples it) and woke before the first look: the run
    ends there (reason 8) with no look, so the recorder never samples a thread its own timers sample again."""
    w = native.ext.Walker(64, HIDDEN_FILES)
    state = _State(True, True, False)
    reason, looks, *_ = _run(w, spinner.ident, state, until_ms=2000)
    assert (reason, looks) == (8, 0) and state.reads == 2
    assert w.rows() == []


@needs_walker
def test_a_main_thread_its_own_timers_sample_is_never_looked_at(spinner):
    w = native.ext.Walker(64, HIDDEN_FILES)
    reason, looks, n, _next, seen, ran, *_ = _run(w, spinner.ident, _State(True, False), until_ms=2000)
    assert reason == 2 and looks >= 1 and n == 0  # (the only other thread is skipped: a look where none ran)
    assert spinner.ident in seen and ran == []
    assert [r for r in w.rows() if r[1] == spinner.ident] == []


@needs_walker
@pytest.mark.parametrize("state", [None, "inactive"])
def test_without_its_own_timers_the_main_thread_is_looked_at(spinner, state):
    w = native.ext.Walker(64, HIDDEN_FILES)
    reason, looks, n, _next, seen, ran, *_ = _run(w, spinner.ident, None if state is None else _State(False, False),
                                                   until_ms=30, quiet_looks=10_000)
    # (quiet_looks: a loaded machine may leave the spinner unscheduled for a period; a look where it did not run would
    # otherwise end the run by the quiet rule, reason 2, which is not what this test is about)
    assert reason == 0 and looks >= 1 and spinner.ident in seen  # (running, but not resting: the run goes on)
    rows = w.rows()  # (ran is the last look's: on a loaded machine the spinner may have sat out that one period)
    assert {r[1] for r in rows} == {spinner.ident} and any(r[4] > 0 for r in rows)  # (walked, with its CPU time)


@needs_walker
def test_a_resting_main_thread_that_runs_ends_the_run(spinner):
    w = native.ext.Walker(64, HIDDEN_FILES)
    reason, looks, n, _next, seen, ran, *_ = _run(w, spinner.ident, _State(True, True), until_ms=2000)
    assert (reason, looks) == (3, 1) and spinner.ident in ran
    assert {r[1] for r in w.rows()} == {spinner.ident}


@needs_walker
def test_notify_ends_the_wait_and_a_released_lock_the_run(spinner):
    w = native.ext.Walker(64, HIDDEN_FILES)
    lock = threading.Lock()
    lock.acquire()
    out = []
    th = threading.Thread(target=lambda: out.append(_run(w, spinner.ident, _State(True, False), until_ms=60_000,
                                                         period_ms=30_000, lock=lock, first_ms=30_000)))
    th.start()
    w.notify()  # (before the wait or in it: the eventfd keeps it)
    wait_until(lambda: out, 20, "the run to end at notify")
    th.join()
    assert out[0][:2] == (1, 0)
    lock.release()  # the session's finish: the next run ends at once
    reason, looks, *_ = _run(w, spinner.ident, _State(True, False), until_ms=60_000, period_ms=30_000, lock=lock,
                             first_ms=30_000)
    assert (reason, looks) == (1, 0)


@needs_walker
def test_quiet_looks_go_on_in_the_call_until_they_cover_quiet_ns():
    """A look where no thread ran does not end the run until such looks in a row cover ``quiet_ns``, each counting the
    period it stands for (a rate the budget lowered covers the same time in fewer looks; the loop's quiet rule: then
    it looks less often, or rests); the count goes on from the ``quiet`` given and comes back, in ns."""
    ev, ready = threading.Event(), threading.Event()
    th = threading.Thread(target=lambda: (ready.set(), ev.wait()))
    th.start()
    ready.wait()
    try:
        wait_until(lambda: "wait" in repr(sys._current_frames().get(th.ident)), 10, "the thread to wait")
        w = native.ext.Walker(64, HIDDEN_FILES)
        got = _run(w, th.ident, None, until_ms=60_000, quiet_looks=5)
        q1 = w.quiet_looks
        # (its first look walks it, a new thread counts as run; on a busy machine it may still be entering its wait)
        assert got[0] == 2 and got[1] >= 6 and got[8] == 5 * MS, got
        got2 = _run(w, th.ident, None, until_ms=60_000, quiet=3, quiet_looks=5)
        q2 = w.quiet_looks
        assert (got2[0], got2[1], got2[8]) == (2, 2, 5 * MS), got2  # (the count goes on from 3 ms: two more)
        got3 = _run(w, th.ident, None, until_ms=60_000, period_ms=2.5, quiet_looks=2)  # 5 ms at 2.5 ms a look
        q3 = w.quiet_looks
        assert (got3[0], got3[1], got3[8]) == (2, 2, 5 * MS), got3
        # each run's first look is a full one; the looks after it at which the thread's CPU clock stood still are
        # quiet looks, made without the GIL and recording nothing
        assert q1 >= 1 and q2 == 1 and q3 == 1 and got[5] == got2[5] == got3[5] == []
        rows = [r for r in w.rows() if r[1] == th.ident]
        assert len(rows) == got[1] - q1 + got2[1] - q2 + got3[1] - q3
        # no time lost: each row after the first is charged the whole time since the one before it
        assert [r[3] for r in rows[1:]] == [b[0] - a[0] for a, b in zip(rows, rows[1:])]
    finally:
        ev.set()
        th.join()


def _functions(th) -> list[str]:
    f, out = sys._current_frames().get(th.ident), []
    while f is not None:
        out.append(f.f_code.co_name)
        f = f.f_back
    return out


@needs_walker
def test_a_thread_that_moves_ends_the_quiet_looks_and_is_walked_at_its_new_stack():
    """Quiet looks (no thread's CPU clock moved since the run's last full look: no GIL, no rows) end at the first look
    after a thread ran: that look walks it where it waits now and charges it the whole time since its last row."""
    go, stop, ready = threading.Event(), threading.Event(), threading.Event()

    def first_wait():
        go.wait()

    def second_wait():
        stop.wait()

    def body():
        ready.set()
        first_wait()
        second_wait()

    th = threading.Thread(target=body)
    th.start()
    ready.wait()
    try:
        wait_until(lambda: "first_wait" in _functions(th), 10, "the first wait")
        w = native.ext.Walker(64, HIDDEN_FILES)
        out = []
        runner = threading.Thread(target=lambda: out.append(
            (_run(w, th.ident, None, until_ms=60_000, period_ms=2, quiet_looks=10_000), w.quiet_looks)))
        runner.start()
        wait_until(lambda: w.quiet_looks > 0 or out, 20, "quiet looks")  # (the count so far, while the run goes on)
        quiet_before = w.quiet_looks
        go.set()
        wait_until(lambda: "second_wait" in _functions(th), 10, "the second wait")
        moved_at = w.quiet_looks  # (a quiet look after this one follows the full look that saw the move)
        wait_until(lambda: w.quiet_looks > moved_at, 20, "quiet looks after the move")
        w.notify()
        runner.join()
        (reason, looks, *_), quiet = out[0]
        assert reason == 1 and quiet > 0, out
        rows = [r for r in w.rows() if r[1] == th.ident]
        # (a row a full look; the look after the move may split its charge: the wait at the old stack, the run at
        # the new one, two rows)
        assert looks - quiet <= len(rows) <= looks - quiet + 1 and len(rows) >= 2, (rows, looks, quiet)
        assert quiet_before > 0 and rows[0][2] != rows[-1][2]  # (walked at the first wait, then at the second)
        assert [r[3] for r in rows[1:]] == [b[0] - a[0] for a, b in zip(rows, rows[1:])]
    finally:
        go.set()
        stop.set()
        th.join()
