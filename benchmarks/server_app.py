"""A long-running SD server with many threads, for ``server_overhead.py``: the main thread runs an asyncio event
loop (idle in its select between requests), a session worker thread runs each request's generation (the tiny
pipeline's UNet and scheduler, step by step), ``--idle-threads`` background threads wait in C (a SimpleQueue, an
Event, a socket accept), and the loop's default executor adds its waiting threads. Phases: ``--idle`` seconds
with every thread waiting, then ``--gens`` requests one after another; repeated ``--phases`` times.

Prints one JSON line per phase: the idle phase's process CPU seconds per second (what the threads cost while
nothing happens; with ``--idle`` longer than ``--idle-tail``, its first ``--idle-tail`` s and the rest apart too) and
each generation's wall and process CPU seconds, and the session worker's own CPU and run-queue wait seconds in it
(``/proc/self/task/TID/schedstat``: its wall less those is the time it waited, for the GIL above all).

``--ab HZ`` (run without ``stepscope run``; ``--store`` the store): an in-process A/B of sampling and the memory
lane over traces alone. Each generation runs inside a stepscope session of its own, started from the event loop's
(main) thread before the request and finished after it: "full" (sampling at HZ, the memory lane on) or "traces"
(``--hz 0``, no memory lane), both tracing ``TRACES``, the two alternating (the order flips every phase). Each
generation's line then says its configuration (``gen_config``). Each session first runs ``--ab-warm`` untimed
generations (1 by default): its sampler's tables and the traced code's first calls are a long-running server's
cost once, not every request's; then ``--ab-session-gens`` timed ones (1 by default), the configuration alternating
by session."""
from __future__ import annotations

import _queue
import argparse
import asyncio
import json
import queue
import socket
import threading
import time


def build():
    import torch

    from stepscope.pipelines.sd import build_pipeline

    torch.manual_seed(0)
    return build_pipeline("tiny")


def generate(pipe, steps: int, seed: int) -> float:
    import torch

    sched, unet = pipe.scheduler, pipe.unet
    g = torch.Generator().manual_seed(seed)
    cond = torch.randn((2, 77, unet.config.cross_attention_dim), generator=g)
    sched.set_timesteps(steps)
    latents = torch.randn((1, unet.config.in_channels, 8, 8), generator=g) * sched.init_noise_sigma
    with torch.no_grad():
        for t in sched.timesteps:
            inp = sched.scale_model_input(torch.cat([latents] * 2), t)
            pred = unet(inp, t, encoder_hidden_states=cond).sample
            uncond, text = pred.chunk(2)
            latents = sched.step(uncond + 7.5 * (text - uncond), t, latents).prev_sample
    return float(latents.mean())


TRACES = ("diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
          "diffusers.schedulers.scheduling_ddim.DDIMScheduler.step")


def session(config: str, hz: float, store: str):
    """Start a stepscope session of ``config`` ("full" or "traces", see ``--ab``) in this process."""
    from stepscope.record import api
    from stepscope.record.settings import Settings

    full = config == "full"
    return api.start(Settings(functions_to_trace=TRACES, profiles_hz=hz if full else 0, memory=full, store=store))


def _schedstat(native_id: int) -> tuple[int, int]:
    """(CPU ns, run-queue wait ns) of a thread of this process (Linux; (0, 0) elsewhere)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            a = f.read().split()
        return int(a[0]), int(a[1])
    except OSError:
        return 0, 0


def idle_threads(n: int) -> list:
    out, socks = [], []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            target = _queue.SimpleQueue().get
        elif kind == 1:
            target = threading.Event().wait
        else:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            socks.append(s)
            target = s.accept
        th = threading.Thread(target=target, name=f"idle-{i}", daemon=True)
        th.start()
        out.append(th)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle-threads", type=int, default=9)
    ap.add_argument("--phases", type=int, default=3)
    ap.add_argument("--idle", type=float, default=2.0)
    ap.add_argument("--idle-tail", type=float, default=2.0,
                    help="with a longer --idle, its first this many s (after the requests: their last write, the "
                         "recorder's way to its rest) and the rest (a steady idle) are reported apart too")
    ap.add_argument("--gens", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ab", type=float, default=None, help="in-process A/B at this sampling rate (see above)")
    ap.add_argument("--store", default=None, help="the store of --ab's sessions")
    ap.add_argument("--ab-warm", type=int, default=1, help="untimed generations at the start of each --ab session")
    ap.add_argument("--ab-aa", action="store_true",
                    help="an A/A process: both sides of --ab traces alone (the design's own reading, its noise and bias)")
    ap.add_argument("--ab-session-gens", type=int, default=1,
                    help="timed generations each --ab session serves (the configuration alternates by session)")
    a = ap.parse_args()
    pipe = build()
    generate(pipe, 2, 0)  # warm-up
    jobs: queue.Queue = queue.Queue()

    def worker():
        me = threading.get_native_id()
        while True:
            job = jobs.get()
            if job is None:
                return
            seed, done = job
            s0 = _schedstat(me)
            c0, t0 = time.process_time(), time.perf_counter()
            generate(pipe, a.steps, seed)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            s1 = _schedstat(me)
            done.put((wall, cpu, (s1[0] - s0[0]) / 1e9, (s1[1] - s0[1]) / 1e9))

    threading.Thread(target=worker, name="session-worker", daemon=True).start()
    idle_threads(a.idle_threads)

    async def serve():
        loop = asyncio.get_running_loop()
        for p in range(a.phases):
            c0, t0 = time.process_time(), time.perf_counter()
            split = {}
            if a.idle > a.idle_tail:  # (the first idle_tail s, then the rest: a steady idle)
                await asyncio.sleep(a.idle_tail)
                c1, t1 = time.process_time(), time.perf_counter()
                await asyncio.sleep(a.idle - a.idle_tail)
                split = {"idle_tail_cpu_per_s": (c1 - c0) / (t1 - t0),
                         "idle_steady_cpu_per_s": (time.process_time() - c1) / (time.perf_counter() - t1)}
            else:
                await asyncio.sleep(a.idle)
            idle_cpu = (time.process_time() - c0) / (time.perf_counter() - t0)
            gens, configs = [], []
            for k in range(a.gens):
                done: queue.Queue = queue.Queue(maxsize=1)
                m = a.ab_session_gens
                if a.ab is not None:
                    configs.append(("full", "traces")[(k // m + p) % 2])
                if a.ab is not None and k % m == 0:
                    session("traces" if a.ab_aa else configs[-1], a.ab, a.store)
                    for _ in range(a.ab_warm):  # untimed: the session's first stacks and calls (a server's once)
                        warm: queue.Queue = queue.Queue(maxsize=1)
                        jobs.put((k, warm))
                        await loop.run_in_executor(None, warm.get)
                jobs.put((k, done))
                gens.append(await loop.run_in_executor(None, done.get))
                if a.ab is not None and (k % m == m - 1 or k == a.gens - 1):
                    from stepscope.record import api

                    api.shutdown()
            print(json.dumps({"phase": p, "threads": threading.active_count(), "idle_cpu_per_s": idle_cpu, **split,
                              "gen_wall": [g[0] for g in gens], "gen_cpu": [g[1] for g in gens],
                              "gen_worker_cpu": [g[2] for g in gens], "gen_worker_runq": [g[3] for g in gens],
                              "gen_config": configs}), flush=True)
        jobs.put(None)

    asyncio.run(serve())


if __name__ == "__main__":
    main()
