"""ComfyUI under ``stepscope run`` through tests/apps/comfyui_driver.py (its HTTP API, a tiny random SD15-detected
checkpoint): skipped unless COMFYUI_DIR names a ComfyUI checkout and COMFYUI_PYTHON a Python with ComfyUI's
requirements and stepscope's runtime dependencies (stepscope itself comes from this checkout's src/)."""

import json
import os
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from stepscope.store import spanblock

COMFY = os.environ.get("COMFYUI_DIR")
PYTHON = os.environ.get("COMFYUI_PYTHON")
DRIVER = Path(__file__).with_name("comfyui_driver.py")
SRC = Path(__file__).resolve().parents[2] / "src"

pytestmark = pytest.mark.skipif(not (COMFY and PYTHON),
                                reason="set COMFYUI_DIR and COMFYUI_PYTHON (see tests/apps/comfyui_driver.py)")

UNET = "comfy.ldm.modules.diffusionmodules.openaimodel.UNetModel.forward"
EXECUTE = "execution.execute"  # async def execute(server, dynprompt, caches, current_item, ...): one node
EULER = "comfy.k_diffusion.sampling.sample_euler"  # found by getattr(k_diffusion_sampling, "sample_" + name)


@pytest.mark.timeout(1500)
def test_comfyui_txt2img_traced(tmp_path):
    store = tmp_path / "store"
    env = dict(os.environ, STEPSCOPE_STORE=str(store),
               PYTHONPATH=os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]))
    prefix = f"{PYTHON} -m stepscope run -q --trace {UNET} --trace {EXECUTE} --trace {EULER} --"
    r = subprocess.run([PYTHON, str(DRIVER), "--prompts", "2", "--steps", "8", "--json", "--prefix", prefix],
                       env=env, capture_output=True, text=True, timeout=1400)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-8000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert figures["exit"] == 0 and len(figures["prompts"]) == 2
    db = sqlite3.connect(store / "runs.db")
    counts = Counter(s[2] for (rid,) in db.execute("select id from runs") for s in spanblock.iter_spans(db, rid))
    unresolved = [json.loads(u or "{}") for (u,) in db.execute("select unresolved from runs")]
    db.close()
    assert not any(unresolved), unresolved
    # one UNet call per step (cond and uncond in one batch), one sampler call per prompt; the second prompt (a new
    # seed) runs only KSampler, VAEDecode and SaveImage again: ComfyUI does not stage the nodes whose outputs
    # it has cached
    assert counts[UNET] == 16 and counts[EULER] == 2, counts
    assert counts[EXECUTE] == 7 + 3, counts
