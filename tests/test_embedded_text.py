"""Stored text can never change a page's structure: span names, attributes, frame names, thread names
and argv holding ``<!--<script>``, ``</script>``, ``<script>`` or U+2028/U+2029 are shown literally in
the report file and in every served page (run, explain, device, report download, benchmarks), which
still draw (headless Chromium: no JS errors, no injected script run, the waterfall's spans there)."""

import json
import sys

import pytest
from conftest import PROGRAMS, run_cli
from serve_helpers import Server, auth, envelope

from stepscope.store import bench as bench_store
from stepscope.store import keys as keystore
from stepscope.store.db import Store

HOSTILE = ["<!--<script>", "</script><script>window.pwned=1</script>", "<script>window.pwned=2</script>",
           "line\u2028sep\u2029para & <b>bold</b>"]
EID = "c" * 32


def hostile_envelope() -> bytes:
    start = 1_795_000_000.0
    spans = [{"span_id": f"{i + 2:016x}", "parent_span_id": f"{1:016x}", "op": "function", "description": HOSTILE[i % 4],
              "start_timestamp": start + 0.1 * i, "timestamp": start + 0.1 * i + 0.05,
              "data": {"thread.id": "7", "thread.name": "<!--<script>", "note": "</script><!--<script>\u2028"}}
             for i in range(8)]
    tx = {"type": "transaction", "event_id": EID, "transaction": "<!--<script>tx", "start_timestamp": start,
          "timestamp": start + 1.0, "platform": "python", "spans": spans,
          "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": f"{1:016x}", "op": "</script>", "data": {"thread.id": "7"}}}}
    frames = [{"function": "main", "module": "__main__", "abs_path": "/a.py", "lineno": 2},
              {"function": "<!--<script>", "module": "evil", "abs_path": "/x/</script><!--.py", "lineno": 1},
              {"function": "</script><script>window.pwned=3</script>", "module": "evil", "abs_path": "/y.py", "lineno": 3}]
    prof = {"version": "1", "platform": "python", "timestamp": start,
            "transactions": [{"id": EID, "name": "tx", "active_thread_id": "7"}],
            "profile": {"frames": frames, "stacks": [[1, 0], [2, 0]],
                        "samples": [{"elapsed_since_start_ns": str(k * 10_000_000), "thread_id": "7", "stack_id": k % 2}
                                    for k in range(90)],
                        "thread_metadata": {"7": {"name": "<!--<script>\u2028"}}}}
    return envelope([({"type": "transaction"}, json.dumps(tx).encode()), ({"type": "profile"}, json.dumps(prof).encode())])


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    """A store with a `stepscope run` of tests/programs/hostile_names.py, an ingested transaction with
    hostile span and frame names, and a benchmark with hostile labels; and a server over it."""
    work = tmp_path_factory.mktemp("hostile")
    store = work / "store"
    r = run_cli(["run", "-q", "--", sys.executable, str(PROGRAMS / "hostile_names.py"), "<!--<script>", "</script>"], store)
    assert r.returncode == 0, r.stderr
    key = keystore.add(Store(store), "1").public_key
    st = Store(store)
    spec = {"kind": "command", "configs": [{"args": "<!--<script>"}, {"args": "</script><script>window.pwned=4</script>"}],
            "warmup": 0, "repeats": 3, "baseline": 0, "command": ["python", "x.py", "{args}"]}
    bench_store.create(st, "bench-hostile", spec, ["<!--<script>", "</script><script>window.pwned=4</script>"])
    for rep in range(3):
        for cfg in (0, 1):
            bench_store.add_run(st, "bench-hostile", cfg, rep, False, 1.0 + 0.1 * cfg + 0.01 * rep)
    bench_store.update(st, "bench-hostile", status="done")
    srv = Server(store)
    try:
        status, body, _ = srv.post("/api/1/envelope/", hostile_envelope(), auth(key))
        assert status == 200, body
        runs = {r.command[0]: r.id for r in Store(store).list_runs()}
        srv.run_id, srv.ingested_id = runs[sys.executable], runs["<!--<script>tx"]
        srv.work = work
        yield srv
    finally:
        srv.stop()


def embedded_data(html: str) -> str:
    """The text of the page's data element, cut where an HTML parser would end it at the earliest."""
    return html.split('<script id="stepscope-data" type="application/json">', 1)[1].split("</script", 1)[0]


def test_embedded_json_holds_no_markup_characters(hostile_store):
    """What the browser tests see, checked without a browser: the data element's text has no character
    that could end it or change how the parser reads it, and it still parses to the stored names."""
    srv = hostile_store
    pages = []
    for rid in (srv.run_id, srv.ingested_id):
        out = srv.work / f"check-{rid}.html"
        assert run_cli(["report", rid, "-o", str(out)], srv.store).returncode == 0
        pages.append(out.read_text(encoding="utf-8"))
        for path in (f"/runs/{rid}", f"/runs/{rid}/explain", f"/runs/{rid}/device", f"/runs/{rid}/report.html"):
            status, body, _ = srv.get(path)
            assert status == 200
            pages.append(body.decode())
    for html in pages:
        text = embedded_data(html)
        assert not set(text) & set("<>&\u2028\u2029"), [c for c in "<>&\u2028\u2029" if c in text]
        view = json.loads(text)
        assert set(HOSTILE) <= set(view["names"])
        assert html.count("<script") == 2  # the data element and the report's script, nothing more


def test_bench_pages_escape_hostile_labels(hostile_store):
    srv = hostile_store
    out = srv.work / "bench-raw.html"
    assert run_cli(["bench", "show", "bench-hostile", "--html", str(out)], srv.store).returncode == 0
    for html in (srv.get("/bench/bench-hostile")[1].decode(), out.read_text(encoding="utf-8")):
        assert "&lt;!--&lt;script&gt;" in html and "<!--<" not in html and "window.pwned=4</script>" not in html


def check_report_page(page, url: str, spans: int, names: list[str], mode: str = "run") -> None:
    page.errors.clear()
    page.goto(url)
    assert page.evaluate("typeof window.stepscopeReport") == "object", f"{url}: the report script did not run"
    assert page.errors == []
    assert page.evaluate("window.pwned") is None  # no stored text ran as a script
    assert page.evaluate("stepscopeReport.spanCount") == spans
    if mode == "explain":  # the explain page leads with the explanation, no waterfall
        assert not page.locator("#waterfall").is_visible() and page.locator("#verdict").is_visible()
    else:
        assert page.locator("#waterfall").bounding_box()["height"] > 50
    if mode == "run":
        table = page.locator("#spanstats").inner_text()
        for name in names:
            assert name.replace("\u2028", "").replace("\u2029", "") in table.replace("\u2028", "").replace("\u2029", ""), name


def test_report_file_shows_hostile_text_literally(browser_page, hostile_store):
    store = hostile_store.store
    out = hostile_store.work / "run.html"
    r = run_cli(["report", hostile_store.run_id, "-o", str(out)], store)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "<!--<script>" not in html.split('id="stepscope-data"')[1].split("</script>")[0]
    check_report_page(browser_page, out.as_uri(), 1 + 12, HOSTILE)  # + the root transaction
    assert "<!--<script> </script>" in browser_page.locator("#runinfo").inner_text()  # argv, as text
    out2 = hostile_store.work / "ingested.html"
    assert run_cli(["report", hostile_store.ingested_id, "-o", str(out2)], store).returncode == 0
    check_report_page(browser_page, out2.as_uri(), 1 + 8, HOSTILE)
    top = browser_page.locator("#topself").inner_text()
    assert "evil.<!--<script>" in top and "</script><script>window.pwned=3</script>" in top


def test_served_pages_show_hostile_text_literally(browser_page, hostile_store):
    srv = hostile_store
    for rid, n in ((srv.run_id, 13), (srv.ingested_id, 9)):
        check_report_page(browser_page, f"{srv.url}/runs/{rid}", n, HOSTILE)
        check_report_page(browser_page, f"{srv.url}/runs/{rid}/explain", n, HOSTILE, mode="explain")
        check_report_page(browser_page, f"{srv.url}/runs/{rid}/device", n, HOSTILE, mode="device")
        assert browser_page.locator("#device-none").is_visible()
        status, body, _ = srv.get(f"/runs/{rid}/report.html")
        assert status == 200
        f = srv.work / f"download-{rid}.html"
        f.write_bytes(body)
        check_report_page(browser_page, f.as_uri(), n, HOSTILE)
        status, body, _ = srv.get(f"/api/runs/{rid}/view")
        view = json.loads(body)
        assert set(HOSTILE) <= set(view["names"])
    status, body, _ = srv.get(f"/api/runs/{srv.ingested_id}/view")
    assert "<!--<script>" in json.loads(body)["threads"][0]["name"]


def test_bench_pages_show_hostile_labels_literally(browser_page, hostile_store):
    srv = hostile_store
    out = srv.work / "bench.html"
    assert run_cli(["bench", "show", "bench-hostile", "--html", str(out)], srv.store).returncode == 0
    for url in (f"{srv.url}/bench/bench-hostile", f"{srv.url}/bench", out.as_uri()):
        browser_page.errors.clear()
        browser_page.goto(url)
        assert browser_page.errors == [] and browser_page.evaluate("window.pwned") is None
        if url != f"{srv.url}/bench":
            table = browser_page.locator("#verdict").inner_text()
            assert "<!--<script>" in table and "</script><script>window.pwned=4</script>" in table
