"""``stepscope demo``: trace and profile a Stable Diffusion txt2img run built offline, write its report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import click

from ..core import limits
from ..record.settings import DEFAULT_HZ, check_flags
from .common import PATH, JsonOpt, StoreOpt, UserError, command, err, handles_errors, open_store, print_json


@command("demo")
@click.option("--model", default="tiny", help="tiny, sd15 (SD 1.5 shapes, random weights) or a local diffusers folder.")
@click.option("--steps", type=int, default=10, help="Denoising steps.")
@click.option("--size", type=int, default=None, help="Image size in px, a multiple of 8 (default: 64 for tiny, 512 for "
              "sd15).")
@click.option("--scheduler", default="ddim", help="ddim, euler or dpm.")
@click.option("--prompt", default="a photograph of an astronaut riding a horse")
@click.option("--seed", type=int, default=0)
@click.option("--hz", type=float, default=DEFAULT_HZ, help="Sampling rate per thread (samples/s).")
@click.option("--report", "-o", type=PATH, default=None, help="HTML report path (default: stepscope-RUN.html).")
@StoreOpt
@JsonOpt
@handles_errors
def demo(model: str, steps: int, size: Optional[int], scheduler: str, prompt: str, seed: int, hz: float,
         report: Optional[Path], store: Optional[Path], as_json: bool) -> None:
    """Run txt2img on a Stable Diffusion pipeline under stepscope with the default trace list."""
    from ..output.html.html import write_report
    from ..pipelines.sd import SCHEDULERS, demo_traces
    from ..program.run import die_like
    from ..store.db import DEMO_IMAGE
    from ..store.reader import load_run
    from .run import record

    if scheduler not in SCHEDULERS:
        raise UserError(f"--scheduler: expected one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    limits.in_range("--steps", steps, 1, 10_000, integer=True)
    if size is not None:
        limits.image_size("--size", size)
    limits.in_range("--seed", seed, -(2**63), 2**64 - 1, integer=True)  # what torch.manual_seed takes
    check_flags(profiles_hz=hz)
    if model not in ("tiny", "sd15") and not Path(model).is_dir():
        raise UserError(f"--model {model}: expected tiny, sd15 or a diffusers model folder")
    st = open_store(store, create=True)
    image = st.path / "demo-image.png"
    cmd = [sys.executable, "-m", "stepscope.pipelines.demo_program", "--model", model, "--steps", str(steps),
           "--scheduler", scheduler, "--prompt", prompt, "--seed", str(seed), "--out", str(image)]
    if size:
        cmd += ["--size", str(size)]
    outcome = record(cmd, demo_traces(scheduler), hz, st.path, as_json, quiet=False, transaction="txt2img",
                     report_hint_by_caller=True)
    if outcome.exit_code != 0:
        die_like(outcome.returncode)
        raise SystemExit(outcome.exit_code)
    run_image = st.run_file(outcome.run_id, DEMO_IMAGE, create=True)
    if image.exists():
        image.replace(run_image)
    path = write_report(load_run(st, outcome.run_id), report or Path(f"stepscope-{outcome.run_id}.html"))
    if as_json:
        print_json({"run_id": outcome.run_id, "report": str(path), "image": str(run_image)})
    else:
        err.print(f"report: {path}   image: {run_image}")
