"""What sampling costs a busy thread that is not the main one (issue 41), measured in the thread itself: the time it
is off the CPU while it has work, in the same process, sessions alternating.

A worker thread runs torch ops (64x64 matmuls and GELUs, which release the GIL) with a little Python between them,
without end; the main thread sleeps (it rests after a second, as a server's event loop between requests). A worker
like this is never blocked but on the GIL, so its time off the CPU (wall time less its CPU time, from
``/proc/self/task/TID/schedstat``; the run-queue wait shown apart) is the time it waited for the GIL that another
thread held: here, mostly stepscope's recorder thread, which takes the GIL at each look at the worker's stack. Sessions
of "full" (sampling at ``--hz``, the memory lane on) and "traces" (``--hz 0``, no memory lane) alternate ``--rounds``
times; each is measured over ``--seconds`` after 1.3 s (the main thread's rest). Prints per configuration the median
of the worker's off-CPU ms a second, the recorder thread's CPU ms a second and the time the worker spent in its own
timer's signal handler (``record/native/ownclock.c``: it reads its own stack; STEPSCOPE_OWN_TIMERS=0 turns
that off, the recorder then reads it at every look), and the difference as a share of the worker's time. Linux only. The figure is far steadier than a throughput A/B on a shared VM: the worker's CPU
speed does not enter it.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/thread_stall.py [--rounds 4] [--seconds 3] [--hz 101]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))


def _sched(native_id: int) -> tuple[int, int]:
    """(CPU ns, run-queue wait ns) of a thread of this process."""
    with open(f"/proc/self/task/{native_id}/schedstat") as f:
        a = f.read().split()
    return int(a[0]), int(a[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--hz", type=float, default=101.0)
    a = ap.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("Linux only (/proc/self/task/TID/schedstat)")
    import torch

    from stepscope.record import api
    from stepscope.record.settings import Settings

    torch.set_num_threads(1)
    x = torch.randn(64, 64)
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            y = x
            for _ in range(4):
                y = torch.nn.functional.gelu(y @ x)
            s = 0
            for i in range(50):
                s += i

    worker = threading.Thread(target=work, name="worker", daemon=True)
    worker.start()
    store = tempfile.mkdtemp(prefix="stepscope-stall-")
    got: dict[str, dict[str, list[float]]] = {c: {"off": [], "rq": [], "rec": [], "own": []} for c in ("full", "traces")}
    for r in range(a.rounds):
        for cfg in (("full", "traces") if r % 2 == 0 else ("traces", "full")):
            full = cfg == "full"
            api.start(Settings(profiles_hz=a.hz if full else 0, memory=full, store=store, functions_to_trace=()))
            try:
                time.sleep(1.3)
                rec = [t.native_id for t in threading.enumerate() if t.name == "stepscope-recorder"]
                c0, q0 = _sched(worker.native_id)
                r0 = _sched(rec[0])[0] if rec else 0
                walker = api.current_session().sampler._walker
                h0 = walker.own_ns if walker is not None else 0
                t0 = time.perf_counter_ns()
                time.sleep(a.seconds)
                c1, q1 = _sched(worker.native_id)
                r1 = _sched(rec[0])[0] if rec else 0
                dt = time.perf_counter_ns() - t0
            finally:
                api.shutdown()  # (its last look accounts the handlers' last samples: own_ns a few ms late at most)
            h1 = walker.own_ns if full and walker is not None else h0
            got[cfg]["off"].append((dt - (c1 - c0)) / dt * 1e3)
            got[cfg]["rq"].append((q1 - q0) / dt * 1e3)
            got[cfg]["rec"].append((r1 - r0) / dt * 1e3)
            got[cfg]["own"].append((h1 - h0) / dt * 1e3)
    stop.set()
    worker.join()
    med = {c: {k: statistics.median(v) for k, v in d.items()} for c, d in got.items()}
    print(f"a busy worker thread beside stepscope at {a.hz:g} Hz, {a.rounds} sessions a side of {a.seconds:g} s; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; load average {os.getloadavg()[0]:.1f}")
    for c, m in med.items():
        print(f"{c:7s} worker off the CPU {m['off']:6.2f} ms/s (run-queue wait {m['rq']:.2f}; sessions: "
              + ", ".join(f"{v:.2f}" for v in got[c]["off"]) + f"); recorder thread CPU {m['rec']:6.2f} ms/s; the worker's own timer's handler {m['own']:.2f} ms/s")
    print(f"sampling and the memory lane stall the worker {(med['full']['off'] - med['traces']['off']) / 10:+.2f}% of "
          f"its time; its own timer's handler (record/native/ownclock.c) takes {med['full']['own'] / 10:.3f}% of it "
          f"(STEPSCOPE_OWN_TIMERS=0: none, the recorder reads it)")


if __name__ == "__main__":
    main()
