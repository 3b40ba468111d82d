"""Overhead of `stepscope run --device-trace` on a PyTorch/XLA program (XLA:CPU), against the same program
without stepscope, in one command: the tiny SD pipeline on the XLA device with the fixed Euler scheduler
(tests_xla/programs/xla_sd.py), called --runs times; the first call compiles, the later ones are timed (the
program prints each call's wall time). Prints the median warm call of each and their ratio.

Run it in the XLA virtualenv: `$(scripts/xla_venv.sh | tail -n 1) benchmarks/xla_overhead.py [--runs 6]`.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROG = ROOT / "tests_xla" / "programs" / "xla_sd.py"
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
PIPE = "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.StableDiffusionPipeline.__call__"


def warm_times(cmd: list[str], env: dict) -> list[float]:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    secs = [float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("seconds ")]
    return secs[1:]  # the first call compiles


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    prog = [str(PROG), "--scheduler", "fixed", "--steps", str(args.steps), "--runs", str(args.runs), "--time"]
    with tempfile.TemporaryDirectory() as tmp:
        env["STEPSCOPE_STORE"] = str(Path(tmp) / "store")
        base = warm_times([sys.executable, *prog], env)
        traced = warm_times([sys.executable, "-m", "stepscope", "run", "-q", "--device-trace", "--trace", UNET,
                             "--trace", PIPE, "--", sys.executable, *prog], env)
    b, t = statistics.median(base), statistics.median(traced)
    print(f"tiny SD on XLA:CPU, {args.steps} steps, median of {len(base)} warm calls")
    print(f"  without stepscope          {b * 1000:8.1f} ms")
    print(f"  stepscope --device-trace   {t * 1000:8.1f} ms   ratio {t / b:.2f}x")


if __name__ == "__main__":
    main()
