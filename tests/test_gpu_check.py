"""`make gpu-check` (benchmarks/gpu_check.py) where there is no GPU: one line, non-zero exit; and its CPU dry
run's table (the same code paths as on a GPU, with the tiny pipeline; CUDA-only checks SKIP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _run(args, env=None, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=str(ROOT),
                          env=dict(os.environ, **(env or {})), timeout=timeout)


def test_no_cuda_says_so_in_one_line_and_fails():
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    except ImportError:
        pass
    p = _run([])
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert p.returncode == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpu-check: no CUDA GPU here: ") and "torch" in lines[0]
    assert not (ROOT / ".gpu-venv").exists() or (ROOT / ".gpu-venv" / ".gpu-check-installed").exists()


def test_no_torch_interpreter_is_named(tmp_path):
    p = _run([], env={"GPU_PYTHON": "/nonexistent/python3"})
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "/nonexistent/python3" in lines[0]


def test_cpu_dry_run_prints_and_writes_the_table(tmp_path):
    out = tmp_path / "out"
    p = _run(["--cpu-dry-run", "--checks", "1,3,6", "--workdir", str(tmp_path / "work")], env={"OUT": str(out)})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / "gpu_check.json").read_text())
    rows = {r["check"].split()[0]: r for r in doc["rows"]}
    assert {"1a", "1b", "1c", "1d", "1e", "3a", "3b", "6"} <= set(rows)
    assert rows["1b"]["status"] == "SKIP"  # no kernels on the CPU
    for k in ("1c", "1d", "1e", "3a", "3b"):
        assert rows[k]["status"] == "PASS", rows[k]
    assert "scheduling_euler_discrete.py:" in rows["1e"]["figure"] and "image_processor.py:" in rows["1e"]["figure"]
    assert "diff 0.0%" in rows["3b"]["figure"]  # stepscope's UNet FLOPs = torch's flop counter
    want = "monitoring" if sys.version_info >= (3, 12) else "code"  # the run records its tracing mechanism
    assert f"mechanism {want}, 3 UNet spans" in rows["6"]["figure"]
    md = (out / "gpu_check.md").read_text()
    assert "| check | figure | bound | status |" in md and md.count("| PASS |") >= 5
    lines = p.stdout.splitlines()
    head = [i for i, ln in enumerate(lines) if ln.split()[:4] == ["check", "figure", "bound", "status"]]
    assert len(head) == 1  # ONE table
    assert lines[-1].startswith("5 passed, 0 failed, 3 skipped")
    assert "Per span" in (out / "stepscope_device.txt").read_text()  # `stepscope device RUN` of the traced run
