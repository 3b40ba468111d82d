"""The sampler's two walks on the same parked threads (tests/test_stackwalk.py runs this on each interpreter with
PYTHONPATH=src): prints one JSON object with each walk's stacks by thread name (root first, as (function, module,
file, line)), at the default depth and at a max_depth of 16, and what a C look allocates.

Threads: nested plain functions, a generator, a coroutine under asyncio, a recursion 60 deep, one inside a C call
(time.sleep), and a script run by runpy (whose frames the sampler leaves out: HIDDEN_FILES)."""

import asyncio
import gc
import json
import os
import runpy
import sys
import tempfile
import threading
import time

from stepscope.record import native
from stepscope.record.sampling.sampler import HIDDEN_FILES, Sampler

ev = threading.Event()
parked: list[threading.Event] = []


def park(name, target, *args):
    ready = threading.Event()
    parked.append(ready)
    th = threading.Thread(target=target, args=(ready, *args), name=name, daemon=True)
    th.start()
    return th


def nested_a(ready):
    nested_b(ready)


def nested_b(ready):
    nested_c(ready)


def nested_c(ready):
    ready.set()
    ev.wait()


def gen_body(ready):
    ready.set()
    ev.wait()
    yield 1


def gen_user(ready):
    for _ in gen_body(ready):
        pass


async def inner_coro(ready):
    ready.set()
    ev.wait()  # (blocks the loop: the stack stays put)


async def main_coro(ready):
    await inner_coro(ready)


def coro_user(ready):
    asyncio.run(main_coro(ready))


def deep(ready, n):
    if n:
        return deep(ready, n - 1)
    ready.set()
    ev.wait()


def sleeper(ready):
    ready.set()
    time.sleep(3600)


def by_runpy(ready, path):
    runpy.run_path(path, init_globals={"ready": ready, "ev": ev})


def stacks(s: Sampler, frames: list, stacks_: list, charges: list | None = None) -> dict:
    """Thread name -> its stack (root first) in one look of ``s`` (``frames``, ``stacks_``: its tables so far);
    ``charges`` gets each sample's (wall ns, CPU ns, ns since the look began)."""
    t0 = time.perf_counter_ns()
    s.sample()
    new_frames, new_stacks, samples = s.drain()
    frames += new_frames
    stacks_ += new_stacks
    names = {t.ident: t.name for t in threading.enumerate()}
    out = {}
    for t, tid, sidx, wall, cpu in samples:
        if charges is not None:
            charges.append((wall, cpu, t - t0))
        if tid in names and names[tid] not in out:
            out[names[tid]] = [list(frames[i]) for i in stacks_[sidx]]
    return out


def own_stack(s: Sampler, frames: list, stacks_: list, n: int) -> list:
    """This thread's stack as its signal handler records it (``Sampler.sample_frame`` of the running frame), ``n``
    calls deep and inside a generator: the C walk's ``Walker.walk`` or the Python ``f_back`` walk."""
    if n:
        return own_stack(s, frames, stacks_, n - 1)
    s.sample_frame(sys._getframe(), threading.get_ident(), time.perf_counter_ns(), 1, 0)
    new_frames, new_stacks, samples = s.drain()
    frames += new_frames
    stacks_ += new_stacks
    return [list(frames[i]) for i in stacks_[samples[-1][2]]]


def own_gen(s: Sampler, frames: list, stacks_: list):
    yield own_stack(s, frames, stacks_, 30)


def allocations() -> dict:
    """Blocks a C look allocates at a fresh thread whose stack the walker knows (none: no frame object is made),
    and, for comparison, what materialising that thread's frames (sys._current_frames, f_back) allocates."""
    w = native.ext.Walker(256, HIDDEN_FILES)
    me = {threading.get_ident()}
    park("alloc-1", deep, 40)
    for e in parked:
        e.wait(10)
    time.sleep(0.1)
    w.look(me)
    w.take()
    th = park("alloc-2", deep, 40)  # the same code path: its stack is one the walker has seen
    parked[-1].wait(10)
    time.sleep(0.1)
    for _ in range(3):
        w.look(me)
    gc.collect()
    b0 = sys.getallocatedblocks()
    for _ in range(20):
        w.look(me)
    b1 = sys.getallocatedblocks()
    unseen = w.unseen
    f = sys._current_frames()[th.ident]
    depth = 0
    while f is not None:
        f, depth = f.f_back, depth + 1
    b2 = sys.getallocatedblocks()
    return {"c_look": b1 - b0, "python_walk": b2 - b1, "depth": depth, "unseen": unseen}


def main():
    if native.ext is None or not hasattr(native.ext, "Walker"):
        print(json.dumps({"skip": f"no C walk here ({native.load_error})"}))
        return
    alloc = allocations()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "script.py")
        with open(script, "w") as fh:
            fh.write("def scripted():\n    ready.set()\n    ev.wait()\n\n\nscripted()\n")
        park("nested", nested_a)
        park("generator", gen_user)
        park("coroutine", coro_user)
        park("deep", deep, 60)
        park("sleeper", sleeper)
        park("runpy", by_runpy, script)
        for e in parked:
            e.wait(10)
        time.sleep(0.2)  # (each is in its wait by now)
        out = {"alloc": alloc, "version": list(sys.version_info[:2])}
        for depth in (256, 16):
            for walk in ("c", "python"):
                s = Sampler(max_depth=depth, walk=walk)
                tables = [], []
                c1, c2 = [], []
                t1 = time.perf_counter_ns()
                first = stacks(s, *tables, c1)
                time.sleep(0.05)
                again = stacks(s, *tables, c2)  # every thread has waited since: recorded again, unwalked
                gap = time.perf_counter_ns() - t1
                own = next(own_gen(s, *tables))
                out[f"{walk}-{depth}"] = {
                    "walk": s.walk, "stacks": first, "again": again == first, "ran": len(s.ran),
                    "truncated": s.truncated, "own": own,
                    # a first sample stands for one period; one unwalked again, the time since (no CPU)
                    "first_charges": sorted({(w, c >= 0) for w, c, _ in c1}) == [(s.period_ns, True)],
                    "again_charges": all(50_000_000 <= w <= gap and c == 0 for w, c, _ in c2) and len(c2) == len(c1),
                    "t_in_look": all(0 <= d < 50_000_000 for _, _, d in c1 + c2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
