"""The real ComfyUI server (Comfy-Org/ComfyUI) under `stepscope run --app comfyui`, driven over its HTTP API with a
random-weight checkpoint (tests/apps/comfyui_driver.py): two prompts, the second with a planted slow step inside
its KSampler (a custom node's model patch). `make test-apps`; skipped unless COMFYUI_DIR (a ComfyUI checkout) and
COMFYUI_PYTHON (a Python with its requirements and stepscope's) are set. About 2 minutes on 2 CPU cores."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SRC = HERE.parent.parent / "src"
COMFY, PY = os.environ.get("COMFYUI_DIR"), os.environ.get("COMFYUI_PYTHON")
pytestmark = pytest.mark.skipif(not (COMFY and PY and Path(COMFY, "main.py").exists()),
                                reason="set COMFYUI_DIR (a ComfyUI checkout) and COMFYUI_PYTHON to run ComfyUI")


def test_comfyui_preset_two_prompts_and_a_slow_step(tmp_path):
    store, result, log = tmp_path / "store", tmp_path / "run.json", tmp_path / "server.log"
    env = {**os.environ, "PYTHONPATH": str(SRC), "STEPSCOPE_STORE": str(store), "COLUMNS": "200"}
    prefix = f"{PY} -m stepscope run --app comfyui --hz 199 --json-file {result} --"
    p = subprocess.run([PY, str(HERE / "comfyui_driver.py"), "--prompts", "2", "--steps", "8", "--slow-step", "5",
                        "--slow-prompt", "1", "--prefix", prefix, "--log", str(log)], env=env, capture_output=True,
                       text=True, timeout=1500)
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads(result.read_text())["run"]
    screen = log.read_text()
    # node spans by type and id, every node of the workflow (custom node included); the per-node table
    nodes = {n["name"]: n for n in run["nodes"]["nodes"]}
    for name in ("CheckpointLoaderSimple #4", "CLIPTextEncode #6", "CLIPTextEncode #7", "EmptyLatentImage #5",
                 "KSampler #3", "VAEDecode #8", "SaveImage #9", "StepscopeSlowStep #10"):
        assert name in nodes, sorted(nodes)
    assert nodes["KSampler #3"]["count"] == 2 and nodes["CheckpointLoaderSimple #4"]["count"] == 1
    prompts = run["nodes"]["prompts"]
    assert [r["ran"] for r in prompts] == [8, 4] and prompts[1]["cached"] == 4, prompts
    assert "Nodes (per node" in screen and "Prompts" in screen
    # steps per prompt, named by the prompt and the node that ran the sampler; the planted step slow
    rows = run["steps"]["rows"]
    assert [(r["call"], r["step"]) for r in rows] == [(c, k) for c in (0, 1) for k in range(8)]
    assert run["steps"]["call_labels"] in ({0: "prompt 0 · KSampler #3", 1: "prompt 1 · KSampler #3"},
                                           {"0": "prompt 0 · KSampler #3", "1": "prompt 1 · KSampler #3"})
    slow = {(r["call"], r["step"]) for r in rows if r["slow"]}
    assert (1, 5) in slow, slow
    assert "--app comfyui" not in run["unresolved"], run["unresolved"]
    ex = subprocess.run([PY, "-m", "stepscope", "explain"], env=env, capture_output=True, text=True, timeout=300)
    assert "step 5 (prompt 1 · KSampler #3)" in ex.stdout and "busy_preview" in ex.stdout, ex.stdout
