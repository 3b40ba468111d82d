"""The pytest plugin's baseline check on the built-in tiny Stable Diffusion pipeline (issue 40): a test that generates
an image with the UNet's forward traced is recorded on "main" (the baseline store), then run again three ways against
that baseline: unchanged (an A/A pair: must pass), with a planted 30% slow-down in the UNet (a forward hook that spins
for 30% of each forward's own time: must fail, with diff's verdict), and with a budget it cannot meet (one line).

    python benchmarks/ci_gate_tiny.py [--steps 10] [--size 64] [--plant 1.3]

Prints each inner pytest's outcome and stepscope's lines, then the measured step ratio against the baseline (the
planted slow-down as diff measures it). Exit status 0 when the A/A run passed and the planted one failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TEST = '''
import os, time
import pytest
import torch

from stepscope.pipelines.sd import build_pipeline

UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
torch.set_num_threads(1)  # (steady step times beside other programs: no spinning thread pool)
PIPE = build_pipeline("tiny", "ddim")
PLANT = float(os.environ.get("PLANT", "1"))
if PLANT != 1:  # a slower UNet: each forward is followed by a spin of (PLANT - 1) x its own time
    def _pre(module, args):
        module._t0 = time.perf_counter()

    def _post(module, args, out):
        extra = (time.perf_counter() - module._t0) * (PLANT - 1)
        t = time.perf_counter()
        while time.perf_counter() - t < extra:
            pass

    PIPE.unet.register_forward_pre_hook(_pre)
    PIPE.unet.register_forward_hook(_post)


@pytest.mark.stepscope(trace=[UNET], budget={"step": os.environ.get("BUDGET", "p50 < 60s")})
def test_txt2img():
    PIPE("an astronaut riding a horse", num_inference_steps=STEPS, height=SIZE, width=SIZE)
'''


def inner(folder: Path, *args: str, **env: str) -> tuple[int, list[str]]:
    """Run pytest in ``folder`` with ``args``; returns its exit status and stepscope's lines."""
    e = dict(os.environ, **env)
    e.pop("STEPSCOPE_STORE", None)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=folder, env=e,
                       capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if "stepscope" in ln and "budget" in ln
             or "slower than the baseline" in ln or "no significant difference" in ln or "passed" in ln
             or "failed" in ln]
    return p.returncode, lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--plant", type=float, default=1.3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_tiny.py").write_text(TEST.replace("STEPS", str(a.steps)).replace("SIZE", str(a.size)))
        base = ["--stepscope-store", str(folder / "main-runs")]
        code, lines = inner(folder, *base)
        print(f"baseline on main: exit {code}: {lines[-1] if lines else ''}")
        against = ["--stepscope-store", str(folder / "pr-runs"), "--stepscope-baseline", str(folder / "main-runs")]
        aa, aa_lines = inner(folder, *against)
        print(f"A/A against the baseline: exit {aa}")
        for ln in aa_lines:
            print("   ", ln.strip())
        slow, slow_lines = inner(folder, *against, PLANT=str(a.plant))
        print(f"UNet {a.plant:.2f}x slower against the baseline: exit {slow}")
        for ln in slow_lines:
            print("   ", ln.strip())
        budget, budget_lines = inner(folder, "--stepscope-store", str(folder / "b-runs"), BUDGET="p50 < 1ms")
        print(f"a budget of p50 < 1ms per step: exit {budget}")
        for ln in budget_lines:
            print("   ", ln.strip())
        m = re.search(r"is (\d+\.\d+)x slower", " ".join(slow_lines))
        print(f"measured: a denoising step {m.group(1) if m else '?'}x the baseline's (planted {a.plant:.2f}x in "
              f"the UNet's forward)")
        return 0 if aa == 0 and slow != 0 and budget != 0 else 1


if __name__ == "__main__":
    sys.exit(main())
