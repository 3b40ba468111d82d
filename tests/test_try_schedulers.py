"""`stepscope try`'s `sync-free-scheduler` fix on the common diffusers schedulers (Euler, Euler ancestral,
DPM-Solver++ multistep, DDIM, PNDM): the sync-site inventory of `stepscope run --syncs` has no sync left in the
denoising loop once the fix is applied, and the latents are bit-identical to the program's without it."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

pytest.importorskip("diffusers")
PROGRAM = Path(__file__).parent / "programs" / "try" / "schedulers.py"
SCHEDULERS = ("euler", "euler_a", "dpm", "ddim", "pndm")
#: scheduler methods that run at every step (or at the first): a sync in one of them is a sync in the loop
PER_STEP = ("step", "step_plms", "step_prk", "index_for_timestep", "_init_step_index", "_get_variance",
            "_get_prev_sample", "scale_model_input")


def _sites(tmp_path: Path, fix: bool) -> tuple[list[dict], dict]:
    store = tmp_path / ("fixed" if fix else "plain") / "store"
    store.parent.mkdir(parents=True)
    out = store.parent / "latents.npz"
    p = run_cli(["run", "-q", "--syncs", "--", sys.executable, str(PROGRAM), "--out", str(out)] + (["--fix"] if fix else []),
                store)
    assert p.returncode == 0, p.stderr[-3000:]
    dev = run_cli(["device", "--json"], store)
    assert dev.returncode == 0, dev.stderr
    with np.load(out) as z:
        return json.loads(dev.stdout)["device"]["sync_sites"], {k: z[k] for k in z.files}


def _in_loop(sites: list[dict]) -> dict[str, int]:
    """Sync sites in a scheduler's per-step methods: ``{"Class.method": count}``."""
    return {s["function"]: s["count"] for s in sites
            if s["where"].startswith("scheduling_") and s["function"].rsplit(".", 1)[-1] in PER_STEP}


def test_sync_free_scheduler_leaves_no_sync_in_the_loop_and_the_same_latents(tmp_path):
    plain_sites, plain = _sites(tmp_path, fix=False)
    fixed_sites, fixed = _sites(tmp_path, fix=True)
    before = _in_loop(plain_sites)
    # what the schedulers' steps did without the fix (diffusers 0.42): the index search, Euler's churn test,
    # DDIM's and PNDM's comparisons on the tensor timestep
    for fn in ("EulerDiscreteScheduler.step", "EulerDiscreteScheduler.index_for_timestep",
               "EulerAncestralDiscreteScheduler.index_for_timestep", "DPMSolverMultistepScheduler.index_for_timestep",
               "DDIMScheduler.step", "DDIMScheduler._get_variance", "PNDMScheduler._get_prev_sample"):
        assert fn in before, (fn, before)
    assert before["EulerDiscreteScheduler.step"] == 2 * 4  # `s_tmin <= sigma <= s_tmax`: two __bool__ a step
    assert _in_loop(fixed_sites) == {}
    # what is left of the schedulers' host reads happens once per schedule, before the loop
    reads = {s["function"]: s["count"] for s in fixed_sites if s["function"] == "retrieve_timesteps"}
    assert reads and reads["retrieve_timesteps"] <= 2 * len(SCHEDULERS)
    assert sorted(plain) == sorted(fixed) == sorted(SCHEDULERS)
    for name in SCHEDULERS:
        assert plain[name].shape == (1, 4, 16, 16)
        assert np.array_equal(plain[name], fixed[name]), name  # bit-identical latents


def test_what_the_fix_says_per_scheduler():
    from diffusers import DDIMScheduler, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler

    from stepscope.fixes.schedulers import removes

    euler = EulerDiscreteScheduler()
    assert [w.split(" ")[0] for w in removes(euler)] == ["set_begin_index(0)", "the"]
    euler.set_begin_index(0)
    assert removes(euler) == ["the churn test on the sigma read on the host (no Tensor.__bool__)"]
    assert removes(DDIMScheduler())[0].startswith("each timestep given to step as the host int")
    ancestral = EulerAncestralDiscreteScheduler()
    assert len(removes(ancestral)) == 1
    ancestral.set_begin_index(0)
    assert removes(ancestral) == []  # nothing left to remove: `try` reports the fix as not applicable
