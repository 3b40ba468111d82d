"""One device view of a run (device/view.py) behind `stepscope device --json`, the report's embedded view
model and the web UI's device page: the same facts for one run (the Kineto join, the probe's peaks, the
compile report, the XLA trace), shown on the page; a device file that cannot be read is the same one line."""

import json
import re

import pytest
from conftest import run_cli
from device_run_helpers import COMPILE, PROBE, device_run
from serve_helpers import Server
from starlette.testclient import TestClient

from stepscope.store.db import COMPILE_REPORT, Store
from stepscope.serve.web import ServerConfig, create_app


def embedded(html: str) -> dict:
    m = re.search(r'<script id="stepscope-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def dev_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("devview") / "store"
    return store, device_run(store)


def test_cli_report_and_web_page_carry_the_same_device_facts(dev_store, tmp_path):
    store, rid = dev_store
    r = run_cli(["device", rid, "--json"], store)
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)
    out = tmp_path / "r.html"
    assert run_cli(["report", rid, "-o", str(out)], store).returncode == 0
    report = embedded(out.read_text(encoding="utf-8"))["device"]
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as c:
        page = c.get(f"/runs/{rid}/device")
        assert page.status_code == 200
        web = embedded(page.text)["device"]
        assert c.get(f"/api/runs/{rid}/view").json()["device"] == web
    assert report == web
    dev, summary = cli["device"], cli["device"]["summary"]
    assert web["compile"] == dev["compile"] == COMPILE
    assert web["peak"] == dev["peak"] == PROBE
    assert web["xla"] == cli["xla"] and web["xla"]["total"]["compiles"] == 2
    # the page adds each kernel's table label (device.names.kernel_label) to the same facts
    from stepscope.device.names import kernel_label

    assert all(o["label"] == kernel_label(o["name"]) for o in web["top_kernels"])
    assert web["top_kernels"]
    assert all(len(k) == 3 and k[2] == kernel_label(k[0]) for s in web["spans"] for k in s["top_kernels"])
    web["top_kernels"] = [{k: v for k, v in o.items() if k != "label"} for o in web["top_kernels"]]
    web["spans"] = [{**s, "top_kernels": [k[:2] for k in s["top_kernels"]]} for s in web["spans"]]
    assert web["spans"] == dev["spans"] and web["sync_sites"] == dev["sync_sites"]
    for k in ("streams", "top_ops", "top_kernels", "sync_counts", "device"):
        assert web[k] == summary[k], k
    assert web["kineto"] is True and web["device"] == "NVIDIA H100 80GB HBM3"
    assert len(web["syncs"]) == len(summary["syncs"]) == 3 and len(web["gaps"]) == min(50, len(summary["gaps"]))


def test_device_page_shows_compile_report_xla_and_peak(browser_page, dev_store):
    store, rid = dev_store
    srv = Server(store)
    try:
        page = browser_page
        page.goto(f"{srv.url}/runs/{rid}/device")
        page.wait_for_function("window.stepscopeReport !== undefined")
        comp = page.locator("#device-compile").inner_text()
        assert "4 graph breaks at 2 places, 2 recompilations" in comp
        assert "unet.py:120" in comp and "Tensor.item() call" in comp and "pipe.py:88 denoise" in comp
        assert "float16 740.0 TFLOP/s" in page.locator("#device-peak").inner_text()
        assert "funcs.add" in page.locator("#device-spans").inner_text()
        xla = page.locator("#device-xla").inner_text()
        assert "graph compilations: 2 (240 us) of 2 graphs" in xla and "/device:TPU:0" in xla
        assert "UncachedCompile 2, CompileTime 2 (240 us)" in xla
        assert "sm90_xmma_gemm_f32f32" in page.locator("#device-ops").inner_text()
        assert "host_wait" in page.locator("#device-gaps").inner_text()
        assert page.errors == []
    finally:
        srv.stop()


def test_an_unreadable_device_file_is_one_line_everywhere(tmp_path):
    store = tmp_path / "store"
    rid = device_run(store)
    f = Store(store).run_file(rid, COMPILE_REPORT)
    f.write_text("{not json")
    r = run_cli(["device", rid], store)
    assert r.returncode == 2 and r.stderr.startswith(f"stepscope: error: {f}: not JSON") and len(r.stderr.splitlines()) == 1
    line = r.stderr.strip().removeprefix("stepscope: error: ")
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as c:
        page = c.get(f"/runs/{rid}/device")
        assert page.status_code == 500 and "Traceback" not in page.text
        assert c.get(f"/api/runs/{rid}/view").json() == {"detail": line}
