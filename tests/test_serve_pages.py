"""The web UI's pages and JSON API over a store (in-process), the keys CLI, `serve --host` warnings,
and the device page in headless Chromium on a run recorded with --device-trace."""

import json
import os
import sys

import pytest
from conftest import run_cli
from serve_helpers import Server, auth, envelope, free_port, transaction
from starlette.testclient import TestClient

from stepscope.store import bench as bench_store
from stepscope.store import keys as keystore
from stepscope.store.db import Store
from stepscope.store.reader import load_run
from stepscope.serve.web import ServerConfig, create_app


@pytest.fixture
def ui(tmp_path):
    store = tmp_path / "store"
    key = keystore.add(Store(store), "1").public_key
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as c:
        for i, (name, dur) in enumerate([("txt2img", 2.0), ("img2img", 0.5), ("txt2img", 1.0), ("upscale", 3.0)]):
            body = envelope([({"type": "transaction"}, transaction(f"{i + 1:032x}", name, start=1_795_000_000.0 + i, dur=dur))])
            assert c.post("/api/1/envelope/", content=body, headers=auth(key)).status_code == 200
        c.store = store
        yield c


def test_list_filters_sorts_and_pages_in_the_url(ui):
    rows = ui.get("/api/transactions?q=TXT2&sort=duration").json()
    assert rows["total"] == 2 and [r["duration_ns"] for r in rows["transactions"]] == [2_000_000_000, 1_000_000_000]
    rows = ui.get("/api/transactions?sort=duration&order=asc").json()["transactions"]
    assert [r["name"] for r in rows] == ["img2img", "txt2img", "txt2img", "upscale"]
    rows = ui.get("/api/transactions?sort=name").json()["transactions"]
    assert [r["name"] for r in rows] == ["img2img", "txt2img", "txt2img", "upscale"]
    newest = ui.get("/api/transactions").json()["transactions"]
    assert newest[0]["name"] == "upscale" and newest[0]["source"] == "sentry" and newest[0]["spans"] == 4
    html = ui.get("/?q=img2img").text
    assert html.count('<tr class=') == 1 and "1 transaction in" in html and "img2img" in html
    assert ui.get("/?sort=bogus").status_code == 400 and "sort must be" in ui.get("/?sort=bogus").text
    assert ui.get("/?page=0").status_code == 400


def test_runs_of_stepscope_run_are_listed_beside_ingested_ones(ui):
    from conftest import PROGRAMS

    r = run_cli(["run", "-q", "--trace", "__main__.hot", "--", sys.executable, str(PROGRAMS / "shape.py"), "0.3"], ui.store)
    assert r.returncode == 0, r.stderr
    rows = ui.get("/api/transactions?q=shape").json()["transactions"]
    assert len(rows) == 1 and rows[0]["source"] == "run" and rows[0]["span_id"] is not None and rows[0]["samples"] > 5
    page = ui.get(f"/runs/{rows[0]['run_id']}")
    assert page.status_code == 200 and "__main__.hot" in page.text  # in the embedded view
    assert ui.get("/api/transactions").json()["total"] == 5


def test_run_pages_and_downloads(ui):
    rid = ui.get("/api/transactions?q=upscale").json()["transactions"][0]["run_id"]
    for path in (f"/runs/{rid}", f"/runs/{rid}/explain", f"/runs/{rid}/device"):
        r = ui.get(path)
        assert r.status_code == 200 and 'src="/static/report.js"' in r.text and "server-timing" in r.headers
    assert 'data-page="explain"' in ui.get(f"/runs/{rid}/explain").text
    view = ui.get(f"/api/runs/{rid}/view").json()
    assert view["run"]["id"] == rid and len(view["spans"]["id"]) == 4
    rep = ui.get(f"/runs/{rid}/report.html")
    assert "attachment" in rep.headers["content-disposition"] and "<script>" in rep.text  # self-contained
    sp = ui.get(f"/runs/{rid}/export/speedscope").json()
    assert sp["$schema"].startswith("https://www.speedscope.app/")
    assert "traceEvents" in ui.get(f"/runs/{rid}/export/chrome").json()
    assert ui.get(f"/runs/{rid[:-2]}").status_code == 200  # a unique prefix works, as in the CLI
    amb = ui.get(f"/runs/{rid[:12]}")
    assert amb.status_code == 404 and "is ambiguous" in amb.text
    r = ui.get("/runs/nope")
    assert r.status_code == 404 and "no run &#39;nope&#39;" in r.text  # escaped
    assert ui.get("/api/runs/nope/view").json()["detail"].startswith("no run")
    assert ui.get(f"/runs/{rid}/export/pdf").status_code == 404


def test_bench_pages(ui):
    st = Store(ui.store)
    spec = {"kind": "sd", "configs": [{"attention": "classic"}, {"attention": "sdpa"}], "warmup": 1, "repeats": 3, "baseline": 0}
    bench_store.create(st, "bench-1", spec, ["attention=classic", "attention=sdpa"])
    for rep in range(3):
        for cfg, t in ((0, 1.0), (1, 0.7)):
            bench_store.add_run(st, "bench-1", cfg, rep, False, t + 0.01 * rep)
    bench_store.update(st, "bench-1", status="done")
    assert "bench-1" in ui.get("/bench").text
    page = ui.get("/bench/bench-1").text
    assert "attention=sdpa" in page and "baseline" in page and "-29.7%" in page  # 0.71 s vs 1.01 s
    png = ui.get("/bench/bench-1/plot.png")
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert ui.get("/bench/none").status_code == 404


def test_bench_page_says_what_was_measured_and_the_verdict(tmp_path, browser_page):
    store = tmp_path / "store"
    st = Store(store)
    base = {"model": "tiny", "target": "pipeline", "attention": "sdpa", "compile": "off", "dtype": "float16", "batch": 1,
            "size": None, "steps": 12, "channels_last": False}
    spec = {"kind": "sd", "configs": [dict(base, attention="classic"), dict(base)], "warmup": 1, "repeats": 4, "baseline": 0}
    bench_store.create(st, "bench-2", spec, ["attention=classic", "attention=sdpa"])
    for rep, (a, b) in enumerate(((1.0, 0.95), (1.2, 1.1), (0.9, 1.05), (1.1, 0.9))):  # overlapping: no verdict
        bench_store.add_run(st, "bench-2", 0, rep, False, a, peak_bytes=300 * 2**20)
        bench_store.add_run(st, "bench-2", 1, rep, False, b, peak_bytes=280 * 2**20)
    bench_store.update(st, "bench-2", status="done", env={"torch": "2.13.0+cpu", "device": "cpu", "device_name": "cpu"})
    st.close()
    srv = Server(store)
    try:
        page = browser_page
        page.goto(srv.url + "/bench/bench-2")
        measured = page.locator("#measured").inner_text()
        for part in ("model tiny", "64 px", "12 steps", "float16", "cpu", "varying: attention"):
            assert part in measured, (part, measured)
        table = page.locator("table#verdict").inner_text()
        assert "no significant difference" in table and "300 MiB" in table and "280 MiB" in table and " MB" not in table
        page.wait_for_function("document.getElementById('plot').complete")
        assert page.locator("#plot").evaluate("img => img.naturalWidth > 0")
        if os.environ.get("STEPSCOPE_SHOTS"):
            page.screenshot(path=os.path.join(os.environ["STEPSCOPE_SHOTS"], "bench-page.png"), full_page=True)
    finally:
        srv.stop()
    text = run_cli(["bench", "show", "bench-2"], store).stdout
    assert "measured: model tiny" in text and "no significant difference" in text and "300 MiB" in text


def test_keys_cli(tmp_path):
    store = tmp_path / "store"
    r = run_cli(["keys", "add", "--project", "7", "--label", "laptop", "--json"], store)
    k = json.loads(r.stdout)
    assert k["project_id"] == "7" and k["dsn"] == f"http://{k['public_key']}@127.0.0.1:8969/7"
    listed = json.loads(run_cli(["keys", "list", "--json"], store).stdout)["keys"]
    assert [x["public_key"] for x in listed] == [k["public_key"]]
    r = run_cli(["keys", "add", "--project", "abc"], store)
    assert r.returncode == 2 and r.stderr.strip() == "stepscope: error: project id 'abc' must be a number (it is the last part of the DSN)"
    r = run_cli(["keys", "rm", "zzzz"], store)
    assert r.returncode == 2 and "no single key matches 'zzzz'" in r.stderr and "Traceback" not in r.stderr
    assert run_cli(["keys", "rm", k["public_key"][:8]], store).returncode == 0
    assert json.loads(run_cli(["keys", "list", "--json"], store).stdout)["keys"] == []


def test_serve_warns_off_loopback_and_makes_a_first_key(tmp_path):
    store = tmp_path / "store"
    srv = Server(store, "--host", "0.0.0.0")
    try:
        log = srv.log.read_text()
        assert "warning: serving on 0.0.0.0" in log and "made a key for project 1" in log
        key = keystore.list_keys(Store(store))[0].public_key
        assert f"http://{key}@127.0.0.1:{srv.port}/1" in log
    finally:
        srv.stop()
    srv2 = Server(store)  # a port taken: one line, exit 2
    try:
        r = run_cli(["serve", "--port", str(srv2.port)], store)
        assert r.returncode == 2 and r.stderr.strip().endswith("Address already in use (another server is there: --port picks another)")
    finally:
        srv2.stop()
    (tmp_path / "file").write_text("not a store")
    r = run_cli(["serve", "--store", str(tmp_path / "file"), "--port", str(free_port())], store)
    assert r.returncode == 2 and r.stderr.startswith("stepscope: error: cannot open store") and "Traceback" not in r.stderr


# ---- the device page in Chromium, on a run recorded with --device-trace (CPU: torch ops and syncs)
from test_device_capture import euler_run  # noqa: E402,F401


def test_device_page_shows_the_syncs_with_their_python_line(browser_page, euler_run):  # noqa: F811
    srv = Server(euler_run)
    try:
        rid = load_run(Store(euler_run)).run.id
        page = browser_page
        page.goto(f"{srv.url}/runs/{rid}/device")
        page.wait_for_function("window.stepscopeReport !== undefined")
        assert page.locator("#device-section").is_visible() and not page.locator("#device-none").is_visible()
        assert "torch ops (host)" in page.evaluate("stepscopeReport.deviceLanes()")
        syncs = page.locator("#device-syncs").inner_text()
        assert "scheduling_euler_discrete.py" in syncs
        # a CPU run: no device timeline, said in words instead of an empty gaps table
        assert "No device timeline on CPU" in page.locator("#device-cpu").inner_text()
        assert not page.locator("#device-gaps-wrap").is_visible()
        # host syncs grouped by Python line: count, total, max; a click shows the group's events
        view = json.loads(srv.get(f"/api/runs/{rid}/view")[1])
        lines = {q["python"] or "(no Python line)" for q in view["device"]["syncs"]}
        groups = page.locator("#device-syncs tr.group")
        assert groups.count() == len(lines) < len(view["device"]["syncs"])
        big = max(range(groups.count()), key=lambda k: int(groups.nth(k).locator("td").nth(2).inner_text()))
        n = int(groups.nth(big).locator("td").nth(2).inner_text())
        assert n > 1 and page.locator("#device-syncs tr.sub:visible").count() == 0
        groups.nth(big).click()
        assert page.locator("#device-syncs tr.sub:visible").count() == min(n, 50)
        if os.environ.get("STEPSCOPE_SHOTS"):
            page.screenshot(path=os.path.join(os.environ["STEPSCOPE_SHOTS"], "device-page.png"), full_page=True)
        assert not page.locator("#flamegraph").is_visible()  # the device page shows the device's sections only
        assert page.errors == []
    finally:
        srv.stop()


def test_the_listening_socket_is_tcp_so_each_connection_gets_nodelay():
    # with proto 0, asyncio skips TCP_NODELAY and every keep-alive request waits ~40 ms for a delayed
    # ACK (a single client fell from ~300 to 21 envelopes/s)
    import socket

    from stepscope.cli.serve import _listen

    s = _listen("127.0.0.1", 0)
    try:
        assert s.proto == socket.IPPROTO_TCP
    finally:
        s.close()
