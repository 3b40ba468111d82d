"""How often a 2-rank DDP job (torchrun, gloo, CPU) hangs at its end under the torch profiler: alone, and under
``stepscope run --device-trace`` (fidelity: a profiled program ends as it would without stepscope).

The job is ``tests/programs/ranks/train.py``: it calls ``destroy_process_group()`` while its DDP model is alive and
frees the model when ``main`` returns, as scripts do. Under the profiler each gloo work launched inside ``backward``
holds a Python object (torch >= 2.12 stashes a ``contextvars.Context`` in the thread's state, which the profiler
copies into the work); a gloo worker that frees such a work takes the GIL, while freeing the model destroys the
process group and joins that worker with the GIL held: a hang, now and then (``tracing/collectives.py``).
stepscope keeps the groups that ``destroy_process_group`` ends alive to the session's finish, where torch frees them
with the GIL released.

Modes, run interleaved: ``profiler`` (the job under ``torch.profiler.profile`` alone: ``--child`` wraps it), and
``stepscope`` (the job under ``stepscope run -q --device-trace``). A run still going after ``--timeout`` seconds
is a hang (its processes are killed). ``--load`` keeps one busy process beside the runs (CI's machine is busy; the
race is rarer on an idle one). Printed: hangs / runs per mode.

    python benchmarks/ddp_teardown.py [--runs 30] [--timeout 30] [--load]
    python benchmarks/ddp_teardown.py --child STEPS   (one rank of the job under the profiler; torchrun starts it)
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "tests" / "programs" / "ranks" / "train.py"


def child(steps: str) -> None:
    """One rank: train.py's main under torch.profiler (CPU activity, shapes and FLOPs, as stepscope records)."""
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(TRAIN.parent))
    import train

    sys.argv = [str(TRAIN), steps]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True):
        train.main()


def one(cmd: list[str], env: dict, timeout: float) -> bool:
    """Run ``cmd`` in a session of its own; True when it hung (still running after ``timeout`` s: killed)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        p.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        # torchrun's ranks may sit in process groups of their own: end whatever is left of this job
        subprocess.run(["pkill", "-9", "-f", str(TRAIN)], check=False)
        subprocess.run(["pkill", "-9", "-f", f"{Path(__file__).name} --child"], check=False)
        return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--steps", default="3")
    ap.add_argument("--load", action="store_true", help="keep one busy process beside the runs")
    ap.add_argument("--child", metavar="STEPS")
    a = ap.parse_args()
    if a.child:
        child(a.child)
        return
    torchrun = str(Path(sys.executable).parent / "torchrun")
    job = ["--standalone", "--nproc-per-node", "2"]
    store = tempfile.mkdtemp(prefix="ddp-teardown-")
    env = dict(os.environ, STEPSCOPE_STORE=store, PYTHONWARNINGS="ignore")
    modes = {
        "profiler": [torchrun, *job, str(Path(__file__).resolve()), "--child", a.steps],
        "stepscope": [sys.executable, "-m", "stepscope", "run", "-q", "--device-trace", "--", torchrun, *job,
                      str(TRAIN), a.steps],
    }
    hangs = dict.fromkeys(modes, 0)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if a.load else None
    t0 = time.perf_counter()
    try:
        for i in range(a.runs):
            for mode, cmd in modes.items():
                hangs[mode] += one(cmd, env, a.timeout)
            print(f"run {i + 1}/{a.runs}: " + ", ".join(f"{m} {h}" for m, h in hangs.items()), file=sys.stderr)
    finally:
        if busy is not None:
            busy.kill()
    print(f"2-rank DDP job (torchrun, gloo, CPU), {a.runs} runs per mode{' beside a busy process' if a.load else ''}"
          f", {time.perf_counter() - t0:.0f} s")
    for mode, h in hangs.items():
        print(f"  {mode:10s} hangs {h} / {a.runs}")


if __name__ == "__main__":
    main()
