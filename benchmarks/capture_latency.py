"""Request latency of a service running the tiny SD pipeline per request: without stepscope, with its
control server idle, and during a capture; and the time from `stepscope capture` to its summary.

    python benchmarks/capture_latency.py [--requests 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

PROG = Path(__file__).resolve().parents[1] / "tests" / "programs" / "sd_server.py"
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"


def start(env: dict, *extra: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, str(PROG), *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    return p, int(p.stdout.readline())


def latencies(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        urllib.request.urlopen(f"http://127.0.0.1:{port}/gen", timeout=120).read()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=12)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="stepscope-capture-")
    env = dict(os.environ, STEPSCOPE_RUNTIME_DIR=f"{tmp}/rt", STEPSCOPE_STORE=f"{tmp}/store", PYTHONWARNINGS="ignore")
    results = {}
    for label, extra in (("no stepscope", ("--no-stepscope",)), ("server idle", ())):
        p, port = start(env, *extra)
        latencies(port, 2)  # warm-up
        results[label] = latencies(port, args.requests)
        if label == "server idle":
            during: list[float] = []
            stop = threading.Event()

            def load() -> None:
                while not stop.is_set():
                    during.extend(latencies(port, 1))

            th = threading.Thread(target=load)
            th.start()
            time.sleep(1)
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(p.pid), "--duration",
                                f"{max(3, args.requests // 2)}s", "--trace", UNET, "--json"],
                               env=env, capture_output=True, text=True)
            capture_s = time.perf_counter() - t0
            n_before = len(during)
            t1 = time.perf_counter()
            r2 = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(p.pid), "--steps", "3",
                                 "--span", "UNet2DConditionModel.forward", "--trace", UNET, "--json"],
                                env=env, capture_output=True, text=True)
            steps_s = time.perf_counter() - t1
            stop.set()
            th.join()
            results["during capture"] = during[1:n_before]  # the requests that ran inside the duration window
            assert r.returncode == 0 and r2.returncode == 0, (r.stderr, r2.stderr)
        p.terminate()
        p.wait()
    base = statistics.median(results["no stepscope"])
    for label, xs in results.items():
        med = statistics.median(xs)
        print(f"{label:<15} {len(xs):3d} requests  median {1e3 * med:7.1f} ms  ({100 * (med / base - 1):+.1f}% vs no stepscope)")
    print(f"`capture --duration` command to summary: {capture_s:.2f} s (window {max(3, args.requests // 2)} s)")
    print(f"`capture --steps 3 --span UNet...forward` command to summary: {steps_s:.2f} s")


if __name__ == "__main__":
    main()
