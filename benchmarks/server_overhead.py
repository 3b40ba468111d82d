"""Overhead of sampling and the memory lane on a long-running server with many threads (issue 27).

Runs ``server_app.py`` (12 Python threads: an asyncio loop, a session worker generating with the tiny SD UNet,
idle threads waiting in C, the loop's executor) plain, under ``stepscope run`` at the defaults (101 Hz, memory
lane on; the UNet and the scheduler's step traced), and under ``stepscope run --hz 0 --no-memory`` (the traces
alone), interleaved, and prints per configuration: the median generation wall time and process CPU time (all the
process's threads, stepscope's included) and their ratio to the plain runs of the same invocation, and the CPU the
process uses per second while every thread waits (with ``--idle`` over 2 s, also its first 2 s after the requests,
which hold the last write of their samples and spans, and the steady idle after them, apart).

``--ab``: the in-process A/B instead (``server_app.py --ab HZ``): ``--rounds`` processes, each ``--ab-session-gens``
timed generations in a stepscope session of their own (after ``--ab-warm`` untimed ones in it: the steady state of a
long-running server, where the sampler knows the code it reads and the main thread rests),
sampling + memory lane ("full") and traces alone alternating; prints the change of
the full sessions' median generation wall and process CPU time over the traces-alone ones, with bootstrap 95% CIs
(``stepscope.bench.stats.compare``: every generation of every process pooled), each process's own change, and the
paired figure (``bench.stats.paired_change``: each full generation against the traces-alone one beside it in its
phase, so that the machine's slow spells, seconds to minutes long on a shared VM, fall in both sides of a pair; its CI
a cluster bootstrap over the processes, whose pairs a spell moves alike: resampled one by one, A/A runs of identical
sides read CIs that excluded 0).
Where those spells still move each generation by far more than sampling costs, two figures of each pair read what
stepscope takes from the generation apart from the machine's speed: the session worker's waits (its wall time less its
own CPU and run-queue time, ``/proc/self/task/TID/schedstat``: the GIL held by another thread, the recorder's looks
and flushes, the main thread's signal ticks) and the CPU of the process's other threads (the recorder's above all),
each as the full side's more than the traces-alone side's, a share of that generation. ``--aa``: every other process
an A/A one (``server_app.py --ab-aa``: both sides traces alone, the same pairing), printed apart: what the design
reads when nothing differs, in the same run, the machine's slow spells and any bias of the pairing in it (on a
2-core VM whose speed moves single processes by -25..+15%, 160 such pairs read +0.56% and +0.76%, CIs of +-1%), so
that the A/B's figure is read against it, not against zero.

    python benchmarks/server_overhead.py --rounds 4
    python benchmarks/server_overhead.py --rounds 2 --idle 6 --configs full,traces
    python benchmarks/server_overhead.py --ab --rounds 4 --phases 4 --gens 10
    python benchmarks/server_overhead.py --ab --rounds 3 --phases 3 --gens 16 --ab-warm 3 --ab-session-gens 4
    python benchmarks/server_overhead.py --ab --aa --rounds 20 --phases 3 --gens 16 --ab-warm 3 --ab-session-gens 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = ["diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
          "diffusers.schedulers.scheduling_ddim.DDIMScheduler.step"]


def run(cmd: list[str], env: dict) -> list[dict]:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds of the three configurations")
    ap.add_argument("--phases", type=int, default=3)
    ap.add_argument("--gens", type=int, default=6)
    ap.add_argument("--idle", type=float, default=2.0)
    ap.add_argument("--idle-threads", type=int, default=9)
    ap.add_argument("--hz", type=float, default=101.0)
    ap.add_argument("--configs", default="plain,full,traces", help="which to run: plain, full, traces, nomem (comma list)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ab", action="store_true", help="the in-process A/B (see above)")
    ap.add_argument("--ab-warm", type=int, default=1, help="untimed generations opening each --ab session")
    ap.add_argument("--ab-session-gens", type=int, default=1,
                    help="timed generations of each --ab session (the k-th of a session paired with the k-th of the "
                         "next one, of the other configuration)")
    ap.add_argument("--aa", action="store_true",
                    help="with --ab: every other process an A/A one (both sides traces alone), its reading printed apart")
    a = ap.parse_args()
    if a.ab:
        return ab(a)
    app = [sys.executable, os.path.join(HERE, "server_app.py"), "--phases", str(a.phases), "--gens", str(a.gens),
           "--idle", str(a.idle), "--idle-threads", str(a.idle_threads), "--steps", str(a.steps)]
    store = tempfile.mkdtemp(prefix="stepscope-server-overhead-")
    base = [sys.executable, "-m", "stepscope", "run", "-q", "--store", store]
    for t in TRACES:
        base += ["--trace", t]
    every = {"plain": ("plain", app), "full": (f"stepscope {a.hz:g} Hz + memory lane", base + ["--hz", str(a.hz), "--", *app]),
             "nomem": (f"stepscope {a.hz:g} Hz, no memory lane", base + ["--hz", str(a.hz), "--no-memory", "--", *app]),
             "traces": ("stepscope traces only (--hz 0 --no-memory)", base + ["--hz", "0", "--no-memory", "--", *app])}
    configs = dict(every[k.strip()] for k in ["plain"] + [c for c in a.configs.split(",") if c.strip() != "plain"])
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    got: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": [], "idle": [], "threads": []} for k in configs}
    run(app, env)  # warm the file cache
    for r in range(a.rounds):
        for name, cmd in configs.items():
            for ph in run(cmd, env)[1:]:  # the first phase warms up (allocator, caches)
                got[name]["wall"] += ph["gen_wall"]
                got[name]["cpu"] += ph["gen_cpu"]
                got[name]["idle"].append(ph["idle_cpu_per_s"])
                if "idle_tail_cpu_per_s" in ph:
                    got[name].setdefault("tail", []).append(ph["idle_tail_cpu_per_s"])
                    got[name].setdefault("steady", []).append(ph["idle_steady_cpu_per_s"])
                got[name]["threads"].append(ph["threads"])
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    plain = got["plain"]
    pw, pc = statistics.median(plain["wall"]), statistics.median(plain["cpu"])
    print(f"{max(plain['threads'])} Python threads, {a.rounds} rounds x {a.phases - 1} measured phases x {a.gens} "
          f"generations, {a.idle:g} s idle per phase; OMP_NUM_THREADS={env['OMP_NUM_THREADS']}; load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    for name, g in got.items():
        w, c = statistics.median(g["wall"]), statistics.median(g["cpu"])
        line = f"{name:44s} generation wall {1e3 * w:7.1f} ms"
        if name != "plain":
            line += f" ({100 * (w / pw - 1):+5.1f}%)"
        line += f"  process CPU {1e3 * c:7.1f} ms"
        if name != "plain":
            line += f" ({100 * (c / pc - 1):+5.1f}%)"
        line += f"  idle: {1e3 * statistics.median(g['idle']):5.2f} ms CPU per s"
        if g.get("tail"):  # (--idle longer than 2 s: its first 2 s after the requests, then the steady idle)
            line += (f" (first 2 s {1e3 * statistics.median(g['tail']):5.2f}, then "
                     f"{1e3 * statistics.median(g['steady']):5.2f})")
        print(line)


def ab(a) -> None:
    """The in-process A/B (``--ab``)."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
    from stepscope.bench.stats import compare, paired_change

    store = tempfile.mkdtemp(prefix="stepscope-server-ab-")
    app = [sys.executable, os.path.join(HERE, "server_app.py"), "--phases", str(a.phases), "--gens", str(a.gens),
           "--idle", "0.2", "--idle-threads", str(a.idle_threads), "--steps", str(a.steps), "--ab", str(a.hz),
           "--store", store, "--ab-warm", str(a.ab_warm), "--ab-session-gens", str(a.ab_session_gens)]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               PYTHONPATH=os.path.join(os.path.dirname(HERE), "src"))
    pooled = {c: {"wall": [], "cpu": []} for c in ("full", "traces")}
    # (full, traces) of adjacent generations of one phase, and the process each pair ran in (the bootstrap's groups)
    pairs = {"wall": ([], []), "cpu": ([], []), "group": []}
    # per pair, what each side's generation lost: the worker's waits (its wall less its CPU and run-queue wait) and
    # the other threads' CPU (the process's less the worker's), as a share of the traces-alone generation
    waits, others = [], []
    per_process = []
    aa_pairs = {"wall": ([], []), "cpu": ([], []), "group": []}  # (--aa: the A/A processes', "full" so labelled)
    for r in range(a.rounds):
        mine = {c: {"wall": [], "cpu": []} for c in ("full", "traces")}
        if a.aa and r % 2 == 1:
            for ph in run(app + ["--ab-aa"], env)[1:]:
                _pairs(ph, a.ab_session_gens, aa_pairs, r)
            print(f"process {r + 1}/{a.rounds} done (A/A)", file=sys.stderr, flush=True)
            continue
        for ph in run(app, env)[1:]:  # the first phase warms up
            for w, c, cfg in zip(ph["gen_wall"], ph["gen_cpu"], ph["gen_config"]):
                for d in (pooled, mine):
                    d[cfg]["wall"].append(w)
                    d[cfg]["cpu"].append(c)
            both = _pairs(ph, a.ab_session_gens, pairs, r)
            wall, cpu, wcpu, wrq = (ph[k] for k in ("gen_wall", "gen_cpu", "gen_worker_cpu", "gen_worker_runq"))
            for j, m in both:
                waited = [wall[x] - wcpu[x] - wrq[x] for x in (j, m)]
                waits.append((waited[0] - waited[1]) / wall[m])
                others.append(((cpu[j] - wcpu[j]) - (cpu[m] - wcpu[m])) / cpu[m])
        per_process.append({k: statistics.median(mine["full"][k]) / statistics.median(mine["traces"][k]) - 1
                            for k in ("wall", "cpu")})
        print(f"process {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    n = len(pooled["full"]["wall"])
    print(f"in-process A/B at {a.hz:g} Hz: {len(per_process)} processes, {n} generations a side of {a.steps} steps "
          f"({a.ab_session_gens} a session, after {a.ab_warm} untimed in it), "
          f"{a.idle_threads} idle threads; OMP_NUM_THREADS={env['OMP_NUM_THREADS']}; load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    for k, label in (("wall", "generation wall"), ("cpu", "process CPU")):
        ch = compare(pooled["full"][k], pooled["traces"][k])
        f, t = statistics.median(pooled["full"][k]), statistics.median(pooled["traces"][k])
        print(f"{label:16s} traces alone {1e3 * t:7.1f} ms, + sampling and memory lane {1e3 * f:7.1f} ms: "
              f"{100 * ch.change:+.2f}% (95% CI {100 * ch.ci_low:+.2f}% to {100 * ch.ci_high:+.2f}%); per process "
              + ", ".join(f"{100 * p[k]:+.1f}%" for p in per_process))
        pc = paired_change(*pairs[k], groups=pairs["group"])
        print(f"{'':16s} paired (each full generation against the traces-alone one beside it, {len(pairs[k][0])} "
              f"pairs of {len(set(pairs['group']))} processes): {100 * pc.change:+.2f}% (95% CI {100 * pc.ci_low:+.2f}% to "
              f"{100 * pc.ci_high:+.2f}%, the processes resampled)")
    if a.aa and aa_pairs["wall"][0]:
        for k, label in (("wall", "generation wall"), ("cpu", "process CPU")):
            pc = paired_change(*aa_pairs[k], groups=aa_pairs["group"])
            print(f"{label:16s} A/A (both sides traces alone, {a.rounds // 2} processes between those, "
                  f"{len(aa_pairs[k][0])} pairs): {100 * pc.change:+.2f}% (95% CI {100 * pc.ci_low:+.2f}% to "
                  f"{100 * pc.ci_high:+.2f}%): the pairing's own reading")
    if any(waits):  # (Linux: the worker's schedstat)
        for label, v, of in (("worker's waits", waits, "generation wall"), ("others' CPU", others, "process CPU")):
            m, lo, hi = _median_ci(v)
            print(f"{label:16s} the full generation's more than the traces-alone one beside it, as a share of the "
                  f"{of}: {100 * m:+.2f}% (95% CI {100 * lo:+.2f}% to {100 * hi:+.2f}%)")


def _pairs(ph: dict, g: int, pairs: dict, process: int) -> list[tuple[int, int]]:
    """Phase ``ph``'s (full, traces) generation pairs, the k-th of a session with the k-th of the next one (``g`` a
    session), their values appended to ``pairs`` ({"wall"|"cpu": (full's, traces'), "group": process}); returns the
    index pairs."""
    cf = ph["gen_config"]
    both = [(i, i + g) if cf[i] == "full" else (i + g, i) for i in range(len(cf) - g) if i % (2 * g) < g]
    for k in ("wall", "cpu"):
        v = ph[f"gen_{k}"]
        for j, m in both:
            pairs[k][0].append(v[j])
            pairs[k][1].append(v[m])
    pairs["group"] += [process] * len(both)
    return both


def _median_ci(v: list[float], rounds: int = 2000) -> tuple[float, float, float]:
    """The median of v with its bootstrap 95% CI (Efron's percentile method, as ``bench.stats``)."""
    import numpy as np

    a = np.asarray(v, float)
    meds = np.median(np.random.default_rng(0).choice(a, (rounds, len(a))), axis=1)
    return float(np.median(a)), float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


if __name__ == "__main__":
    main()
