"""Denoising step time of the tiny SD pipeline (CPU) with every module ``forward`` of its UNet traced, against
untraced in the same process: stepscope's C recorder and its pure-Python recorder (issue 31's target: within 3%
of untraced).

The pipeline is built offline (``pipelines.sd.build_pipeline("tiny")``: random weights, nothing downloaded). The
traced names are the ``forward`` of each class of module the UNet holds, named where the method is defined
(``torch.nn.modules.conv.Conv2d.forward``, ``diffusers.models.resnet.ResnetBlock2D.forward``...; containers
that keep ``Module``'s placeholder ``forward`` are never called and left out). A step is the time between two
``callback_on_step_end`` calls (UNet with classifier-free guidance batched, the guidance arithmetic, the scheduler
step); the first step of each call is left out (it follows the prompt encoding and, traced, the code's first
calls after it was instrumented).

Each recorder runs in processes of its own (``--child native|python``: ``STEPSCOPE_RECORDER`` set, the sampler at
``--hz``, 0 by default so that only the tracing is measured), ``--rounds`` processes each, interleaved. A process
compares in itself: after one warm-up call it makes ``--calls`` pairs of pipeline calls of ``--steps`` steps, one
untraced and one traced (``stepscope.init`` before it, ``stepscope.shutdown`` after; the order of the two
alternates from pair to pair), so that what differs from process to process (memory layout, the CPU's state,
here several percent) is in both sides. Printed per recorder: the median step time of both sides with bootstrap
95% CIs (``bench/stats.py``: every step of every process pooled), the traced side's change with its CI, and each
process's change (ratio of its medians); then the traced calls per step (spans stored inside the UNet's
``forward`` span, per step, read back from the run), of which the step-level ones: the UNet's blocks and its
``Transformer2DModel`` are denoiser forwards by ``steps/hooks.py``'s rule (a class from
``diffusers.models.unets``/``transformers``), recorded by the Python probe with step tags (the outermost one
with memory readings) whichever recorder is in use. Both the wall time and the main thread's CPU time are
printed; on a loaded machine read the CPU time. Last, the paired figure: each traced call's median step against the
untraced call's beside it, the median of those ratios over every pair of every process with a bootstrap CI over the
pairs (``bench.stats.paired_change``): on a machine whose speed moves by 20% for seconds at a time (this project's
shared VMs) the pooled figures above swing with it, the paired one much less.

``--callgrind`` (with ``--steps 4``): deterministic figures instead of times, which a VM's speed does not move: per
recorder one process under valgrind's callgrind (``_callgrind.py``), after a warm-up call of each side one untraced
and one traced call, each counted in the main thread from the end of its first step to its end: instructions,
simulated cache misses, KCachegrind's cycle estimate and its change per step, and the functions whose instructions
changed most (~10 minutes).

    python benchmarks/traced_unet.py [--size 64] [--steps 10] [--calls 6] [--rounds 4] [--threads 1] [--hz 0]
                                     [--recorders native,python]
    python benchmarks/traced_unet.py --callgrind --steps 4 [--size 32] [--recorders native]
    python benchmarks/traced_unet.py --child native|python ...   (one process's figures, JSON on stdout)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _callgrind

ROOT = Path(__file__).resolve().parent.parent
UNET_FORWARD = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
RECORDERS = ("native", "python")


def forward_names(unet) -> list[str]:
    """``module.Qualname.forward`` of each module class in ``unet``, named on the class that defines it."""
    import torch

    out = {}
    for m in unet.modules():
        owner = next(k for k in type(m).__mro__ if "forward" in k.__dict__)
        if owner is not torch.nn.Module:
            out[f"{owner.__module__}.{owner.__qualname__}.forward"] = None
    return list(out)


def calls_per_step(store: str, names: list[str], steps: int) -> tuple[float, dict]:
    """(traced spans inside the UNet forward spans per step, name -> count per step) of the run in ``store``."""
    import numpy as np

    from stepscope.store import Store
    from stepscope.store.reader import load_run

    t = load_run(Store(store)).spans
    code = {n: i for i, n in enumerate(t.names)}
    unet = np.flatnonzero(t.name == code[UNET_FORWARD])
    order = unet[np.argsort(t.start[unet])]
    ustart, uend = t.start[order], t.end[order]
    inner = np.isin(t.name, [code[n] for n in names if n in code and n != UNET_FORWARD])
    rows = np.flatnonzero(inner)
    k = np.searchsorted(ustart, t.start[rows], side="right") - 1
    ok = (k >= 0) & (t.end[rows] <= uend[np.maximum(k, 0)])
    rows = rows[ok]
    by = {}
    for c, n in zip(*np.unique(t.name[rows], return_counts=True)):
        by[t.names[c]] = n / steps
    return len(rows) / steps, by


def child(args) -> dict:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    import stepscope
    from stepscope.pipelines.sd import build_pipeline
    from stepscope.record import native

    if native.RECORDER != args.child:
        raise SystemExit(f"asked for the {args.child} recorder, got {native.RECORDER} ({native.load_error})")
    pipe = build_pipeline("tiny")
    names = forward_names(pipe.unet)
    store = tempfile.mkdtemp(prefix="stepscope-traced-unet-")
    marks: list[tuple[int, int]] = []
    clock, cpu = time.perf_counter_ns, time.thread_time_ns

    measure = [None]  # the label of the call measured under callgrind (``--callgrind``), or None
    cg = _callgrind.Marks()

    def on_step(p, i, t, kw):
        marks.append((clock(), cpu()))
        if i == 0 and measure[0]:
            cg.start()
        return kw

    def call(traced: bool):
        if traced:
            stepscope.init(functions_to_trace=names, profiles_hz=args.hz, store=store, transaction="traced-unet")
        marks.clear()
        try:
            pipe("a photo of an astronaut", num_inference_steps=args.steps, height=args.size, width=args.size,
                 generator=torch.Generator().manual_seed(0), callback_on_step_end=on_step, output_type="latent")
            if measure[0]:
                cg.dump(measure[0])
        finally:
            if traced:
                stepscope.shutdown()
        return [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:])]

    call(False)  # warm-up
    if args.callgrind:  # one call a side, measured after its first step: the same instructions at every run
        call(True)  # (the traced side's warm-up: its instrumented code kept for the next session)
        for traced, label in ((False, "plain"), (True, "traced")):
            measure[0] = label
            call(traced)
        return {"callgrind": True}
    out = {m: {"steps_ns": [], "cpu_ns": []} for m in ("plain", "traced")}
    out["pairs"] = []  # per pair of calls: [[plain wall, plain CPU], [traced wall, traced CPU]], medians of its steps (ns)
    for i in range(args.calls):
        got = {}
        for traced in ((False, True) if i % 2 == 0 else (True, False)):
            got[traced] = call(traced)
        for traced, side in ((False, "plain"), (True, "traced")):
            out[side]["steps_ns"] += [s[0] for s in got[traced]]
            out[side]["cpu_ns"] += [s[1] for s in got[traced]]
        out["pairs"].append([[statistics.median(s[k] for s in got[traced]) for k in (0, 1)] for traced in (False, True)])
    out["traced_names"] = len(names)
    n, by = calls_per_step(store, names, args.steps)
    out.update(calls_per_step=n, by_name=by)
    return out


def run_callgrind(args) -> None:
    """``--callgrind``: per recorder, one child under callgrind (``_callgrind``): after a warm-up call of each side,
    one untraced and one traced call, each measured from the end of its first step to its end in the main thread;
    prints their instructions, cache misses and cycle estimate, the change, and the functions whose instructions
    changed most."""
    why = _callgrind.missing() or ("--steps must be 2 or more (the first step is not measured)" if args.steps < 2
                                    else None)
    if why:
        raise SystemExit(f"--callgrind: {why}")
    for mode in tuple(r for r in RECORDERS if r in args.recorders.split(",")):
        folder = Path(tempfile.mkdtemp(prefix="stepscope-traced-unet-cg-"))
        lib = _callgrind.control_library(folder)
        run_child(mode, args, prefix=_callgrind.command(folder), extra={_callgrind.ENV: str(lib)}, flags=["--callgrind"])
        got = _callgrind.dumps(folder)
        if set(got) != {"plain", "traced"}:
            raise SystemExit(f"--callgrind: no dumps of both calls in {folder} (found {sorted(got)})")
        (fp, p), (ft, t) = got["plain"], got["traced"]
        print(f"{mode} recorder, callgrind, main thread, steps 2-{args.steps} of one call a side ({args.size} px):")
        for k in _callgrind.EVENTS:
            print(f"  {k:5s} untraced {p[k]:>13,} traced {t[k]:>13,}  {100 * (t[k] / max(p[k], 1) - 1):+7.2f}%")
        cp, ct = _callgrind.cest(p), _callgrind.cest(t)
        per = (ct - cp) / (args.steps - 1)
        print(f"  cycle estimate (KCachegrind's CEst) untraced {cp:,} traced {ct:,}: {100 * (ct / cp - 1):+.2f}%, "
              f"{per:+,.0f} a step; instructions {100 * (t['Ir'] / p['Ir'] - 1):+.2f}%")
        a, b = _callgrind.functions(fp), _callgrind.functions(ft)
        diff = sorted(((b.get(k, 0) - a.get(k, 0), k) for k in set(a) | set(b)), key=lambda x: -abs(x[0]))
        print("  instructions that changed most (traced - untraced, self, per step): " + "; ".join(
            f"{k} {d / (args.steps - 1):+,.0f}" for d, k in diff[:10]))
        print(f"  (dumps in {folder}: callgrind_annotate {fp})")


def run_child(mode: str, args, prefix: list[str] = (), extra: dict | None = None, flags: list[str] = ()) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["PYTHONWARNINGS"] = "ignore"
    env["STEPSCOPE_RECORDER"] = mode
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    env.update(extra or {})
    cmd = [*prefix, sys.executable, __file__, "--child", mode, "--size", str(args.size), "--steps", str(args.steps),
           "--calls", str(args.calls), "--threads", str(args.threads), "--hz", str(args.hz), *flags]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if p.returncode:
        raise SystemExit(f"{mode} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.splitlines()[-1])


def report_paired(res: dict) -> None:
    """Print, per recorder, the change of the traced call's median step against the untraced call's beside it, over
    every pair of calls of every process (``bench.stats.paired_change``): the machine's slow spells, seconds to
    minutes on a shared VM, hit both calls of a pair alike, or one pair as an outlier."""
    from stepscope.bench.stats import paired_change

    print("paired (each traced call against the untraced call beside it; median of the pairs' ratios):")
    for m in res:
        pairs = [p for c in res[m] for p in c["pairs"]]
        parts = []
        for k, label in ((0, "wall"), (1, "CPU")):
            ch = paired_change([p[1][k] for p in pairs], [p[0][k] for p in pairs])
            base = statistics.median(p[0][k] for p in pairs) / 1e3
            parts.append(f"{label} {100 * ch.change:+.2f}% (95% CI {100 * ch.ci_low:+.2f}..{100 * ch.ci_high:+.2f}%) = "
                         f"{ch.change * base:+.0f} us of {base:.0f} us")
        print(f"{m + ' recorder':>16}: {len(pairs)} pairs: " + "; ".join(parts))


def report(res: dict, key: str, label: str) -> None:
    """Print, per recorder, the step times ``res[recorder][process][side][key]`` (ns) untraced and traced, and
    the change."""
    from stepscope.bench.stats import compare, describe

    print(f"step time, {label}:")
    for m in res:
        side = {k: [x / 1e6 for c in res[m] for x in c[k][key]] for k in ("plain", "traced")}
        base, d = describe(side["plain"]), describe(side["traced"])
        ch = compare(side["traced"], side["plain"])
        procs = [statistics.median(c["traced"][key]) / statistics.median(c["plain"][key]) - 1 for c in res[m]]
        print(f"{m + ' recorder':>16}: untraced {base.median:.3f} ms ({base.ci_low:.3f}..{base.ci_high:.3f}), "
              f"traced {d.median:.3f} ms ({d.ci_low:.3f}..{d.ci_high:.3f}), {d.n} steps each -> "
              f"{100 * ch.change:+.2f}% (95% CI {100 * ch.ci_low:+.2f}..{100 * ch.ci_high:+.2f}%"
              f"{'' if ch.significant else ', not significant'}); per process "
              + " ".join(f"{100 * x:+.1f}%" for x in procs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=64,
                    help="image size in px (default: the tiny pipeline's own, pipelines.sd.default_size; 32 is the "
                         "hardest case: the same calls for a quarter of the work)")
    ap.add_argument("--steps", type=int, default=10, help="denoising steps per pipeline call")
    ap.add_argument("--calls", type=int, default=6, help="pairs of pipeline calls (untraced, traced) per process")
    ap.add_argument("--rounds", type=int, default=4, help="processes per recorder, interleaved")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--hz", type=float, default=0.0, help="stepscope's sampler in the traced calls (0: off)")
    ap.add_argument("--recorders", default=",".join(RECORDERS), help="the recorders compared (default: both)")
    ap.add_argument("--child", choices=RECORDERS)
    ap.add_argument("--callgrind", action="store_true",
                    help="deterministic figures instead: one call a side under valgrind's callgrind (see _callgrind.py); "
                         "use --steps 4 (each measured step takes minutes)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    sys.path.insert(0, str(ROOT / "src"))
    if args.callgrind:
        run_callgrind(args)
        return
    load0 = os.getloadavg()[0]
    recs = tuple(r for r in RECORDERS if r in args.recorders.split(","))
    res: dict[str, list[dict]] = {m: [] for m in recs}
    for r in range(args.rounds):
        for mode in (recs if r % 2 == 0 else recs[::-1]):
            res[mode].append(run_child(mode, args))
        print(f"round {r + 1}: " + ", ".join(
            f"{m} {statistics.median(res[m][-1]['plain']['steps_ns']) / 1e6:.2f} -> "
            f"{statistics.median(res[m][-1]['traced']['steps_ns']) / 1e6:.2f} ms" for m in recs), flush=True)
    load1 = os.getloadavg()[0]
    first = res[recs[0]][0]
    print(f"\ntiny SD pipeline, CPU, {args.size} px, {args.steps} steps, {args.calls} pairs of calls (untraced, "
          f"traced) per process (+1 warm-up), {args.rounds} processes per recorder, {args.threads or 'default'} torch "
          f"thread(s), sampler {args.hz:g} Hz; {first['traced_names']} forward methods traced; load average "
          f"{load0:.2f} -> {load1:.2f}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    for key, label in (("steps_ns", "wall"), ("cpu_ns", "CPU (main thread)")):
        report(res, key, label)
    report_paired(res)
    from stepscope.bench.stats import compare
    from stepscope.core.steprules import kind_of_name

    scoped = sum(k for n, k in first["by_name"].items() if kind_of_name(n) == "scoped")
    print(f"traced calls per step inside the UNet forward: {first['calls_per_step']:.0f} (+1 the UNet forward); "
          f"{scoped:.0f} of them and the UNet forward are step-level spans (denoiser rule of steps/hooks.py: "
          f"Python probe, step tags), the rest recorded by the recorder under test")
    for m in recs:
        parts = []
        for key, label in (("steps_ns", "wall"), ("cpu_ns", "CPU")):
            plain = [x for c in res[m] for x in c["plain"][key]]
            ch = compare([x for c in res[m] for x in c["traced"][key]], plain)
            base = statistics.median(plain)
            parts.append(f"{ch.change * base / 1e3:+.0f} us {label} (95% CI {ch.ci_low * base / 1e3:+.0f}.."
                         f"{ch.ci_high * base / 1e3:+.0f})")
        print(f"{m} recorder: the step's change: " + ", ".join(parts))
    top = sorted(first["by_name"].items(), key=lambda kv: -kv[1])
    print("per step: " + ", ".join(f"{n.rsplit('.', 2)[-2]} {k:g}" for n, k in top))


if __name__ == "__main__":
    main()
