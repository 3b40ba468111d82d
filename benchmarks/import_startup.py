"""Start-up cost of stepscope's import hook on a large import graph (issue 38): ``import torch, transformers,
diffusers`` and the classes a pipeline script takes from them (UNet2DConditionModel and two schedulers from
diffusers' lazy modules, CLIPTextModel from transformers': about 2,900 modules), plain, under ``stepscope run``
with nothing traced (the hook watches only the modules of stepscope's integrations: torch.distributed,
torch._dynamo...), and with traced names that resolve late, as those modules import (the hook watches every
module of their packages; the names are traced as their modules execute: on 3.11 that recompiles each function).

Each configuration runs ``--rounds`` times, interleaved (plain, untraced, traced, plain, ...), so that the load
of a shared machine falls on all three alike. Printed per configuration: the imports' time measured inside the
program (perf_counter around the import statements: the hook's and the tracing's cost, not stepscope's own
start and finish) and the whole command's wall time, median and min, and the ratios to plain and of traced
to untraced. The traced names must all resolve (the run fails otherwise).

    python benchmarks/import_startup.py --rounds 5
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
t0 = time.perf_counter()
import torch, transformers, diffusers
from diffusers import UNet2DConditionModel, DDIMScheduler, EulerDiscreteScheduler
from transformers import CLIPTextModel
print(json.dumps({"import_s": time.perf_counter() - t0, "modules": len(sys.modules)}))
'''

#: names that resolve only once their modules import (a method in a lazy module, a glob over a package's modules)
LATE = ["diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
        "diffusers.schedulers.scheduling_*.*.step",
        "transformers.models.clip.modeling_clip.CLIPTextModel.forward"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved runs of each configuration")
    ap.add_argument("--trace", action="append", help=f"a traced name (repeatable; default: {' '.join(LATE)})")
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
        res: dict[str, list[tuple[float, float]]] = {k: [] for k in configs}
        modules = {}
        for _ in range(args.rounds):
            for name, cmd in configs.items():
                t = time.perf_counter()
                r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                wall = time.perf_counter() - t
                if r.returncode != 0 or "not traced" in r.stderr:
                    sys.exit(f"{name} failed: {r.stderr[-2000:]}")
                out = json.loads(r.stdout.strip().splitlines()[-1])
                res[name].append((out["import_s"], wall))
                modules[name] = out["modules"]
    load = os.getloadavg()[0]
    print(f"import torch, transformers, diffusers (+ 4 classes): {modules['plain']} modules, "
          f"{args.rounds} interleaved runs each, load average {load:.1f} on {os.cpu_count()} CPUs")
    print(f"traced: {' '.join(names)}")
    print(f"{'config':<10} {'imports median':>15} {'min':>8} {'command median':>15} {'min':>8}  (s)")
    stats = {}
    for k, v in res.items():
        imp, wall = [x[0] for x in v], [x[1] for x in v]
        stats[k] = (statistics.median(imp), min(imp), statistics.median(wall), min(wall))
        print(f"{k:<10} {stats[k][0]:>15.3f} {stats[k][1]:>8.3f} {stats[k][2]:>15.3f} {stats[k][3]:>8.3f}")
    for a, b in (("untraced", "plain"), ("traced", "plain"), ("traced", "untraced")):
        ratios = " ".join(f"{stats[a][i] / stats[b][i]:.2f}x" for i in range(4))
        print(f"{a} / {b}: imports median, min; command median, min: {ratios}")


if __name__ == "__main__":
    main()
