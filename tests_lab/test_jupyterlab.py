"""JupyterLab in a real browser (issue 40): a notebook with ``%%stepscope`` cells, executed on a real kernel (nbclient),
signed as trusted (as JupyterLab signs what it ran itself), opened in JupyterLab started by the test, in headless
Chromium: the inline report's waterfall and flame graph are drawn, and a click on a span shows its flame graph.

Screenshots land in ``$STEPSCOPE_SCREENSHOTS`` (default: the test's temporary folder). `make test-lab` runs this.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import CHROMIUM, CHROMIUM_ARGS, browser_or_skip, wait_until  # noqa: E402

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("jupyterlab")

TOKEN = "stepscope-test-token"

CELLS = [
    "%load_ext stepscope\nimport time\ndef spin(s):\n    t = time.perf_counter()\n    while time.perf_counter() - t < s:\n"
    "        pass\ndef denoise(i):\n    spin(0.02 if i != 5 else 0.06)\ndef decode():\n    spin(0.03)\n",
    "%%stepscope --trace __main__.denoise --trace __main__.decode --name lab\n"
    "for i in range(10):\n    denoise(i)\ndecode()",
    "%%stepscope --trace __main__.denoise --trace __main__.decode --name lab --no-report\n"
    "for i in range(10):\n    denoise(i)\ndecode()",
    "%stepscope_diff",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lab")
    data = folder / "jupyter-data"
    env = dict(os.environ, JUPYTER_DATA_DIR=str(data), JUPYTER_CONFIG_DIR=str(folder / "jupyter-config"),
               JUPYTER_RUNTIME_DIR=str(folder / "jupyter-runtime"), HOME=str(folder))
    env.pop("STEPSCOPE_STORE", None)
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute(env=env)
    path = folder / "profiled.ipynb"
    nbformat.write(nb, str(path))
    # trusted, as a notebook JupyterLab ran and saved itself is (its signature in this data folder's database)
    subprocess.run([sys.executable, "-m", "jupyter", "trust", str(path)], env=env, check=True, capture_output=True)
    port = _free_port()
    log = open(folder / "lab.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}",
                             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
                             f"--ServerApp.root_dir={folder}", "--LabApp.news_url=", "--ServerApp.port_retries=0"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    import urllib.request

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited {proc.returncode}: {(folder / 'lab.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_until(up, 120, "jupyter lab to answer")
        yield f"http://127.0.0.1:{port}", folder
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_the_inline_report_is_drawn_and_clickable_in_jupyterlab(lab):
    base, folder = lab
    shots = Path(os.environ.get("STEPSCOPE_SCREENSHOTS") or folder)
    shots.mkdir(parents=True, exist_ok=True)
    pw = browser_or_skip()
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base}/lab/tree/profiled.ipynb?token={TOKEN}", timeout=120_000)
        frame_el = page.wait_for_selector('iframe[title^="stepscope report"]', timeout=120_000)
        frame_el.scroll_into_view_if_needed()
        frame = frame_el.content_frame()
        frame.wait_for_function("() => window.stepscopeReport && window.stepscopeReport.frameCount() > 0",
                                timeout=60_000)
        report = "window.stepscopeReport"
        assert frame.evaluate(f"{report}.spanCount") == 11  # 10 denoise calls and a decode
        first_flame = frame.evaluate(f"{report}.flameTitle()")
        # the waterfall: click the sixth denoise call (the slow one) where it is drawn
        i = frame.evaluate(f"{report}.findSpan('__main__.denoise', 5)")
        assert i >= 0
        frame.evaluate("(i) => document.getElementById('waterfall').scrollIntoView()", i)
        rect = frame.evaluate(f"(i) => {report}.spanRect(i)", i)
        box = frame_el.bounding_box()
        page.mouse.click(box["x"] + rect["x"] + min(rect["w"] / 2, 20), box["y"] + rect["y"] + rect["h"] / 2)
        frame.wait_for_function(f"(t) => {report}.flameTitle() !== t", arg=first_flame, timeout=20_000)
        title = frame.evaluate(f"{report}.flameTitle()")
        assert "denoise" in title, title
        assert frame.evaluate(f"{report}.frameCount()") > 0
        page.screenshot(path=str(shots / "jupyterlab-inline-report.png"))
        frame_el.screenshot(path=str(shots / "jupyterlab-inline-report-frame.png"))
        frame.evaluate("() => document.getElementById('flame-section').scrollIntoView()")
        frame_el.screenshot(path=str(shots / "jupyterlab-inline-flame.png"))
        # the first screen above it, and the comparison of the cell's two runs
        text = page.inner_text(".jp-Notebook")
        assert "stepscope run " in text and "__main__.denoise" in text
        assert "verdict:" in text
        assert page.query_selector('iframe[title^="stepscope diff"]') is not None
        assert not [e for e in errors if "stepscope" in e.lower()], errors
        assert frame.evaluate("() => document.getElementById('view-error').hidden")
        browser.close()
