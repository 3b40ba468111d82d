"""The PyTorch/XLA tests run in the XLA virtualenv (``make test-xla``, ``scripts/test_xla.sh``): torch,
torch_xla and diffusers there, stepscope from this clone's src/ on PYTHONPATH, PJRT_DEVICE=CPU."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
SRC = HERE.parent / "src"

pytest.importorskip("torch_xla")
pytest.importorskip("diffusers")

# the one helper for waiting on a condition with a deadline, from tests/conftest.py (loaded by its path: both
# files are "conftest" to pytest)
_spec = importlib.util.spec_from_file_location("stepscope_tests_conftest", HERE.parent / "tests" / "conftest.py")
_tests_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tests_conftest)
wait_until = _tests_conftest.wait_until

UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
EULER = "diffusers.schedulers.scheduling_euler_discrete.EulerDiscreteScheduler.step"
PIPE = "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.StableDiffusionPipeline.__call__"


def env_for(store: Path | None = None) -> dict:
    env = dict(os.environ)
    if store is not None:
        env["STEPSCOPE_STORE"] = str(store)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    env["PJRT_DEVICE"] = "CPU"
    env["COLUMNS"] = "220"
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def run_cli(args, store: Path, timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    """The real CLI (``python -m stepscope ARGS``) with its own store, in the XLA virtualenv."""
    return subprocess.run([sys.executable, "-m", "stepscope", *args], cwd=store.parent, env=env_for(store),
                          capture_output=True, text=True, timeout=timeout, **kw)


def run_program(args, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """A program as the user runs it, without stepscope."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env_for(), capture_output=True, text=True,
                          timeout=timeout)
