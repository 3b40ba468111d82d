"""Start-up cost of stepscope's import hook on a large import graph (issue 38): ``import torch, transformers,
diffusers`` and the classes a pipeline script takes from them (UNet2DConditionModel and two schedulers from
diffusers' lazy modules, CLIPTextModel from transformers': about 2,900 modules), plain, under ``stepscope run``
with nothing traced (the hook watches only the modules of stepscope's integrations: torch.distributed,
torch._dynamo...), and with traced names that resolve late, as those modules import (the hook watches every
module of their packages; the names are traced as their modules execute: on 3.11 that recompiles each function).

Each configuration runs ``--rounds`` times, interleaved (plain, untraced, traced, plain, ...), so that the load
of a shared machine falls on all three alike. Printed per configuration: the imports' time measured inside the
program around the import statements (the hook's and the tracing's cost, not stepscope's own start and
finish), as wall time and as the main thread's CPU time (``thread_time``: what the other processes of a busy
machine change least), and the whole command's wall time, median and min of each, and the ratios to plain and
of traced to untraced. The traced names must all resolve (the run fails otherwise).

    python benchmarks/import_startup.py --rounds 5
    python benchmarks/import_startup.py --baseline /tmp/base/src  # also stepscope from another checkout's src/
    python benchmarks/import_startup.py --trace diffusers.models.attention_processor.*.__call__
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

PROGRAM = r'''
import json, sys, time
t0, c0 = time.perf_counter(), time.thread_time()
import torch, transformers, diffusers
from diffusers import UNet2DConditionModel, DDIMScheduler, EulerDiscreteScheduler
from transformers import CLIPTextModel
print(json.dumps({"import_s": time.perf_counter() - t0, "import_cpu_s": time.thread_time() - c0,
                  "modules": len(sys.modules)}))
'''

#: names that resolve only once their modules import (a method in a lazy module, a glob over a package's modules)
LATE = ["diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
        "diffusers.schedulers.scheduling_*.*.step",
        "transformers.models.clip.modeling_clip.CLIPTextModel.forward"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved runs of each configuration")
    ap.add_argument("--trace", action="append", help=f"a traced name (repeatable; default: {' '.join(LATE)})")
    ap.add_argument("--baseline", help="another checkout's src/: its stepscope runs too (untraced-base, traced-base)")
    args = ap.parse_args()
    names = args.trace or LATE
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "imports.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        env = dict(os.environ, STEPSCOPE_STORE=os.path.join(tmp, "store"))
        run = [sys.executable, "-m", "stepscope", "run", "-q"]
        configs = {"plain": [sys.executable, prog],
                   "untraced": [*run, "--", sys.executable, prog],
                   "traced": [*run, *(a for n in names for a in ("--trace", n)), "--", sys.executable, prog]}
        envs = dict.fromkeys(configs, env)
        if args.baseline:
            base_env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [os.path.abspath(args.baseline),
                                                                          os.environ.get("PYTHONPATH")])))
            for k in ("untraced", "traced"):
                configs[k + "-base"], envs[k + "-base"] = configs[k], base_env
        res: dict[str, list[tuple[float, float, float]]] = {k: [] for k in configs}
        modules = {}
        for _ in range(args.rounds):
            for name, cmd in configs.items():
                t = time.perf_counter()
                r = subprocess.run(cmd, env=envs[name], capture_output=True, text=True)
                wall = time.perf_counter() - t
                if r.returncode != 0 or "not traced" in r.stderr:
                    sys.exit(f"{name} failed: {r.stderr[-2000:]}")
                out = json.loads(r.stdout.strip().splitlines()[-1])
                res[name].append((out["import_s"], out["import_cpu_s"], wall))
                modules[name] = out["modules"]
    load = os.getloadavg()[0]
    print(f"import torch, transformers, diffusers (+ 4 classes): {modules['plain']} modules plain, "
          f"{args.rounds} interleaved runs each, load average {load:.1f} on {os.cpu_count()} CPUs")
    print(f"traced: {' '.join(names)}")
    cols = ("imports wall", "imports CPU", "command wall")
    print(f"{'config':<14}" + "".join(f" {c + ' median':>20} {'min':>7}" for c in cols) + "  (s)")
    stats = {}
    for k, v in res.items():
        stats[k] = [f(x[i] for x in v) for i in range(3) for f in (statistics.median, min)]
        print(f"{k:<14}" + "".join(f" {stats[k][2 * i]:>20.3f} {stats[k][2 * i + 1]:>7.3f}" for i in range(3)))
    pairs = [("untraced", "plain"), ("traced", "plain"), ("traced", "untraced")]
    if args.baseline:
        pairs += [("traced-base", "untraced-base"), ("untraced", "untraced-base"), ("traced", "traced-base")]
    for a, b in pairs:
        ratios = "; ".join(f"{c} {stats[a][2 * i] / stats[b][2 * i]:.2f}x, {stats[a][2 * i + 1] / stats[b][2 * i + 1]:.2f}x"
                           for i, c in enumerate(cols))
        print(f"{a} / {b} (median, min): {ratios}")


if __name__ == "__main__":
    main()
