"""The example notebook (``examples/tiny_pipeline.ipynb``) executed on a real kernel, offline, on the built-in tiny
pipeline (issue 40): the magics' outputs, the comparison, the report file. About half a minute; `make test-lab`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_notebook import EXAMPLE, html_of, nbformat, run_notebook, runs_in, text_of  # noqa: E402


def test_the_example_notebook_runs_offline_on_the_tiny_pipeline(tmp_path):
    pytest.importorskip("diffusers")
    pytest.importorskip("torch")
    nb = nbformat.read(str(EXAMPLE), as_version=4)
    for cell in nb.cells:
        assert not cell.get("outputs"), "the example is kept without outputs"
    nb = run_notebook(nb, tmp_path, allow_errors=False, timeout=600)
    code = [c for c in nb.cells if c.cell_type == "code"]
    profiled = next(c for c in code if c.source.startswith("%%stepscope") and "--no-report" not in c.source)
    html = html_of(profiled)
    assert "<iframe srcdoc=" in html and "stepscope run " in html
    assert "denoising steps" in text_of(profiled) or "step" in text_of(profiled)
    diff = next(c for c in code if c.source.startswith("%stepscope_diff"))
    assert "verdict:" in text_of(diff)
    assert (tmp_path / "tiny-pipeline-report.html").stat().st_size > 10_000
    assert len([r for r in runs_in(tmp_path) if r[1][:2] == ["%%stepscope", "txt2img"]]) == 2
    shutil.copy(tmp_path / "executed.ipynb", tmp_path / "tiny_pipeline.executed.ipynb")
