"""Busy threads sampled by a timer of their own (``record/native/ownclock.c``, ``sampling/owntimers.py``).

A thread other than the main one that runs all the time gets a POSIX timer of its own; the signal comes to
that thread while it runs and a C handler reads its stack there, and the recorder looks less often. The samples must
be the thread's own, its time split as it was spent (pure Python too, which a look without the GIL cannot read; a
loop whose period is a multiple of the kernel's tick too), its wall time adding up; a thread that waits half the time
keeps its waits at their stacks; on every interpreter the C walk knows, in a forked child, and with the signal's
handler gone after the session.
"""

from __future__ import annotations

import collections
import signal
import sys
import threading
import time

import pytest
from test_remote_looks import _run as run_program
from test_stackwalk import needs_walker
from test_transparency import INTERPRETERS

PROG = '''\
import json
import os
import sys
import threading
import time

spent = {"py_a": 0.0, "py_b": 0.0, "duty_run": 0.0, "duty_wait": 0.0}


def spin(seconds):  # (pure Python: it holds the GIL, so no look without the GIL can read it)
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def py_a():
    t = time.perf_counter()
    spin(0.03)
    spent["py_a"] += time.perf_counter() - t


def py_b():
    t = time.perf_counter()
    spin(0.01)
    spent["py_b"] += time.perf_counter() - t


def busy_main(seconds):
    end, cpu = time.perf_counter() + seconds, time.thread_time()
    while time.perf_counter() < end:
        py_a()
        py_b()
    spent["busy_cpu"] = time.thread_time() - cpu


def duty_run():
    t = time.perf_counter()
    spin(0.02)
    spent["duty_run"] += time.perf_counter() - t


def duty_wait():
    t = time.perf_counter()
    time.sleep(0.02)
    spent["duty_wait"] += time.perf_counter() - t


def duty_main(seconds):  # (half its time running, half waiting: never left to its own timer)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        duty_run()
        duty_wait()


done = threading.Event()


def run(*targets):
    """Each target in a thread of its own, one after another; every thread alive until the end (a thread started
    after another has ended may get its id)."""
    threads = []
    for target, seconds, name in targets:
        ran = threading.Event()

        def body(target=target, seconds=seconds, ran=ran):
            target(seconds)
            ran.set()
            done.wait()

        threads.append(threading.Thread(target=body, name=name))
        threads[-1].start()
        ran.wait()
    done.set()
    for th in threads:
        th.join()
    gone_by = time.monotonic() + 5  # (3.12+ counts /proc's threads for its fork warning)
    while any(os.path.exists(f"/proc/self/task/{th.native_id}") for th in threads) and time.monotonic() < gone_by:
        time.sleep(0.001)


if sys.argv[1] == "fork":
    pid = os.fork()
    if pid == 0:
        run((busy_main, 2.0, "child-busy"))
        with open(sys.argv[2] + ".child", "w") as f:
            json.dump(spent, f)
        sys.exit(0)
    os.waitpid(pid, 0)
else:
    run((busy_main, 3.0, "busy"), (duty_main, 2.0, "duty"))
with open(sys.argv[2], "w") as f:
    json.dump(spent, f)
'''


def _run(python: str, tmp_path, mode: str) -> tuple[list, dict]:
    return run_program(python, tmp_path, mode, PROG)


def _times(data, thread_name: str, names: tuple[str, ...]) -> tuple[dict, float, set]:
    """({function: wall s of the samples under it}, the thread's sampled wall s, every function in its stacks)."""
    import numpy as np

    from stepscope.analysis.calltree import ProfileIndex

    index = ProfileIndex(data.profile)
    tid = next(t for t, n in data.profile.thread_names.items() if n.endswith(thread_name))
    mine = index.thread == tid
    fnames = [f.name for f in index.functions]
    out = {}
    for name in names:
        under = np.array([any(fnames[f] == name for f in index.stack_funcs[s]) for s in index.stack])
        out[name] = float(index.weight[mine & under].sum()) / 1e9
    seen = {fnames[f] for s in set(index.stack[mine].tolist()) for f in index.stack_funcs[s]}
    return out, float(index.weight[mine].sum()) / 1e9, seen


@pytest.mark.parametrize("python", INTERPRETERS)
def test_a_busy_python_thread_samples_itself_and_a_waiting_one_keeps_its_waits(python, tmp_path):
    datas, truths = _run(python, tmp_path, "threads")
    data = datas[-1]
    info = data.run.env["sampler"]
    if info.get("walk") != "c" or not sys.platform.startswith("linux"):
        pytest.skip(f"the C walk on Linux only: {info}")
    truth = truths[""]
    if truth["busy_cpu"] > 0.95 * 3.0:  # (a machine that gave it a CPU: a thread that waits for one is read by the
        # looks, where its waits are; ~83 samples a second of its CPU time here, at 101 Hz and a 250 Hz tick)
        assert info.get("own_timers", 0) >= 1, (info, truth)  # (the busy thread's; not the one that waits half)
        assert info.get("own_timer_samples", 0) > 10 * truth["busy_cpu"], (info, truth)
        assert info.get("own_timer_missed", 0) < info["own_timer_samples"] / 4, info
    got, wall, seen = _times(data, "busy", ("__main__.py_a", "__main__.py_b"))
    share = got["__main__.py_a"] / (got["__main__.py_a"] + got["__main__.py_b"])
    want = truth["py_a"] / (truth["py_a"] + truth["py_b"])  # (~0.75)
    assert abs(share - want) < 0.08, (share, want, got)
    under = got["__main__.py_a"] + got["__main__.py_b"]  # (its 3 s: each sample's time charged once, by its timer
    assert 2.7 < under < 3.3, (under, wall)  # or by a look; then it waits for the end)
    assert {"__main__.busy_main", "__main__.spin"} <= seen, seen
    got, wall, seen = _times(data, "duty", ("__main__.duty_run", "__main__.duty_wait"))
    under = got["__main__.duty_run"] + got["__main__.duty_wait"]
    assert 1.7 < under < 2.3, (under, wall)
    # its waits at their stack, read by the recorder's looks (truth ~0.5; looks that wait for the GIL that its Python
    # holds read 0.26-0.31 here, with or without the timers)
    assert got["__main__.duty_wait"] / under > 0.15, got


@pytest.mark.parametrize("python", INTERPRETERS[:1])
def test_a_forked_childs_busy_thread_samples_itself(python, tmp_path):
    datas, truths = _run(python, tmp_path, "fork")
    child = next((d for d in datas if any(n.endswith("child-busy") for n in d.profile.thread_names.values())), None)
    assert child is not None, [(d.run.pid, sorted(d.profile.thread_names.values())) for d in datas]
    info = child.run.env["sampler"]
    if info.get("walk") != "c" or not sys.platform.startswith("linux"):
        pytest.skip(f"the C walk on Linux only: {info}")
    t = truths["child"]
    if t["busy_cpu"] > 0.95 * 2.0:  # (given a CPU: see above)
        assert info.get("own_timers", 0) >= 1 and info.get("own_timer_samples", 0) > 10 * t["busy_cpu"], (info, t)
    got, wall, seen = _times(child, "child-busy", ("__main__.py_a", "__main__.py_b"))
    under = got["__main__.py_a"] + got["__main__.py_b"]
    assert abs(got["__main__.py_a"] / under - t["py_a"] / (t["py_a"] + t["py_b"])) < 0.1, (got, t)
    assert 1.7 < under < 2.3, (under, wall)


def _caught() -> int:
    """The mask of the signals this process catches (/proc/self/status SigCgt)."""
    with open("/proc/self/status") as f:
        return int(next(ln for ln in f if ln.startswith("SigCgt:")).split()[1], 16)


@needs_walker
def test_walker_run_leaves_a_busy_thread_to_its_own_timer():
    """Walker.run with the thread's own timer allowed and not, on one thread spinning in pure Python: its samples
    taken by its handler (with), the same most-charged stack, every stack the thread's own, every look's time
    charged; the signal's handler gone after own_signal(0)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    from stepscope.record import native
    from stepscope.record.sampling.owntimers import OwnTimers
    from stepscope.record.sampling.sampler import HIDDEN_FILES

    stop = threading.Event()

    def spinning_here():
        x = 0
        while not stop.is_set():
            for _ in range(1000):
                x += 1

    th = threading.Thread(target=spinning_here)
    th.start()
    clock = time.pthread_getcpuclockid(th.ident)
    own = OwnTimers.start()
    assert own is not None
    signum = own.signum
    try:
        assert _caught() & (1 << (signum - 1))
        got = {}
        for on in (True, False):
            w = native.ext.Walker(64, HIDDEN_FILES)
            w.own_on = on
            held = threading.Lock()
            held.acquire()
            skip = set(sys._current_frames()) - {th.ident}
            ms, now = 1_000_000, time.perf_counter_ns()
            c0 = time.clock_gettime_ns(clock)
            w.run(held, threading.Lock(), skip, 10 * ms, 30 * ms, now, now + 1500 * ms, threading.main_thread().ident,
                  None, threading._active, -1, b"", collections.deque(), 10**9, None, -1, 4096, 10**9, 0, 10**12)
            share = (time.clock_gettime_ns(clock) - c0) / (time.perf_counter_ns() - now)
            w.sample(skip, 10 * ms, 30 * ms)  # (the handler's last samples accounted)
            frames, stacks = w.take()
            rows = [r for r in w.rows() if r[1] == th.ident]
            wall: dict = collections.Counter()
            for r in rows:
                wall[r[2]] += r[3]
            names = {i: {frames[f][0].co_name for f in stacks[i]} for i in wall}
            got[on] = (w.own_threads, w.own_samples, wall, names, share)
            w.own_stop()  # (the timers deleted: what the recorder does at the session's end)
        (threads, samples, wall, names, share), (threads0, samples0, wall0, names0, _) = got[True], got[False]
        if share > 0.95:  # (~1.2 s of its CPU after 5 looks, ~100 a second; a thread that waits for a CPU or the GIL
            assert threads >= 1 and samples > 20, (threads, samples, share)  # more than a tenth: read by looks)
        assert threads0 == 0 and samples0 == 0
        for n in (names, names0):
            assert all("spinning_here" in s for s in n.values()), n
        assert sum(wall.values()) > 1.2e9 and sum(wall0.values()) > 1.2e9, (sum(wall.values()), sum(wall0.values()))
    finally:
        stop.set()
        th.join()
        own.close(None)
    assert not _caught() & (1 << (signum - 1))  # (uninstalled: the default action again)
    assert signal.getsignal(signum) == signal.SIG_DFL
