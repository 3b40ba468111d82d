"""The recorder thread's wait (``sampling.cpuwake.park``): woken by its lock, timed out, and held while a tool of
the program's own (a profiler set on this thread) would see its calls; both the C wait (``_native.park``) and the
Python fallback."""

import sys
import threading

import pytest

from stepscope.record import native
from stepscope.record.sampling import cpuwake


@pytest.fixture(params=["c", "python"])
def park(request, monkeypatch):
    if request.param == "c":
        if native.waits is None:
            pytest.skip("the C extension is not built for this interpreter")
    else:
        monkeypatch.setattr(native, "waits", None)
    return cpuwake.park


def _held():
    lock = threading.Lock()
    lock.acquire()
    return lock


def test_times_out_and_wakes(park):
    lock = _held()
    assert park(lock, 0.01, 0.01, 10) == 0
    threading.Timer(0.05, lock.release).start()
    assert park(lock, 30.0, 1.0, 10) == 1
    assert lock.acquire(blocking=False)  # (given back after the wake)


def test_waits_out_a_profiler_on_this_thread(park):
    lock = _held()
    seen = []
    sys.setprofile(lambda *a: seen.append(a))
    try:
        assert park(lock, 0.01, 0.01, 0) == 3  # (spans waiting reached the limit: it returns to write them)
    finally:
        sys.setprofile(None)
    results = []

    def waiter():
        sys.setprofile(lambda *a: None)
        results.append(park(lock, 0.01, 0.01, 1 << 30))

    th = threading.Thread(target=waiter)
    th.start()
    th.join(0.5)  # (50 of its waits: none returns while the profiler is there)
    assert th.is_alive() and not results
    lock.release()  # a wake-up ends the wait at once
    th.join(5)
    assert results == [1]
