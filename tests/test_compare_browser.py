"""The compare view (`stepscope diff` in the web UI and `stepscope report RUN_B --against RUN_A`) on real
runs of the tiny pipeline, in headless Chromium: pick two runs, read the verdict, the environment change,
the tables and the differential flame graph."""

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import PROGRAMS, run_cli
from serve_helpers import Server

from test_diff import TRACES


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    pytest.importorskip("diffusers")
    store = tmp_path_factory.mktemp("compare") / "store"
    for attn in ("classic", "sdpa"):
        r = run_cli(["run", "-q", "--hz", "199", *TRACES, "--", sys.executable, str(PROGRAMS / "sd_variant.py"), "--steps", "6",
                     "--threads", "1", "--attn", attn], store)
        assert r.returncode == 0, r.stderr
    return store


def shots(tmp_path) -> Path:
    d = Path(os.environ.get("STEPSCOPE_SHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_compare_view_picks_two_runs_from_the_list(browser_page, two_runs, tmp_path):
    srv = Server(two_runs)
    try:
        page = browser_page
        page.goto(srv.url + "/")
        page.locator("#transactions tbody tr").first.locator("a", has_text="compare").click()
        page.wait_for_selector("#verdict")
        assert "/compare?b=" in page.url
        verdict = page.locator("#verdict").inner_text()
        assert "attention processor: AttnProcessor x8 -> AttnProcessor2_0 x8" in verdict, verdict
        first = page.locator("#env tbody tr").first.inner_text()
        assert "attention processor" in first and "AttnProcessor2_0" in first
        headline = page.locator("#headline").inner_text()
        sign = headline.split("(CI")[0].split(", ")[-1][0]  # "+" or "-": the change of the median
        assert headline.startswith("a denoising step: median ") and "over 6 / 6 repeats" in headline
        if "faster" in headline:  # significant (on a busy machine the runs' noise may hide it)
            assert verdict.startswith("Verdict: attention processor: ") and "x faster (CI " in verdict
            assert "attention processor" in page.locator("#env tr.cause").inner_text()
        else:
            assert verdict.startswith("Verdict: no significant difference: a denoising step -")
        assert page.locator("#steps tbody tr").count() == 6
        assert "UNet2DConditionModel.forward" in page.locator("#spans").inner_text()
        rects = page.locator("#dflame .fr")
        assert rects.count() > 20
        title = rects.first.get_attribute("title")
        assert "per repeat" in title and " · B " in title
        box = page.locator("#dflame").bounding_box()
        assert box["height"] > 100 and box["width"] > 800
        page.screenshot(path=str(shots(tmp_path) / "compare_view.png"), full_page=True)
        # pick the runs the other way round from the two lists
        ids = [o.get_attribute("value") for o in page.locator("select[name=a] option").all()]
        newest, older = ids[0], ids[1]
        page.select_option("select[name=a]", newest)
        page.select_option("select[name=b]", older)
        page.click("#pick button")
        page.wait_for_selector("#verdict")
        assert f"a={newest}" in page.url and "AttnProcessor2_0 x8 -> AttnProcessor x8" in page.locator("#verdict").inner_text()
        swapped = page.locator("#headline").inner_text().split("(CI")[0].split(", ")[-1][0]
        assert {sign, swapped} == {"+", "-"}  # B/A - 1 and A/B - 1 of the same medians
        # a span asked for by name; one run twice is refused with the reason
        page.goto(srv.url + f"/compare?a={older}&b={newest}&span=UNet2DConditionModel.forward")
        v = page.locator("#verdict").inner_text()
        assert "UNet2DConditionModel.forward is " in v or "no significant difference: UNet2DConditionModel.forward " in v
        assert page.locator("#steps").count() == 0 and "per call of UNet2DConditionModel.forward" in page.content()
        page.goto(srv.url + f"/compare?a={older}&b={older}")
        assert "same run" in page.locator("#diff-error").inner_text()
        assert page.locator("select[name=a] option[selected]").get_attribute("value") == older
        page.goto(srv.url + f"/compare?a={older}&b={newest}&span=nope")
        assert "--span nope" in page.locator("#diff-error").inner_text()
        assert page.locator("select[name=b] option").count() == 2
        page.goto(srv.url + "/compare?a=zzz")
        assert "no run 'zzz'" in page.locator("#diff-error").inner_text()
        page.goto(srv.url + f"/runs/{newest}")
        assert page.locator("a", has_text="compare").count() >= 1
        assert page.errors == []
    finally:
        srv.stop()


def test_report_against_writes_a_file_that_opens_offline(browser_page, two_runs, tmp_path):
    out = tmp_path / "cmp.html"
    r = run_cli(["report", "last", "--against", "2", "-o", str(out)], two_runs)  # "2": a prefix of both runs
    assert r.returncode == 2 and "ambiguous" in r.stderr and not out.exists()
    r = run_cli(["report", "--against", "last"], two_runs)
    assert r.returncode == 2 and "name the run to compare it with" in r.stderr and "Traceback" not in r.stderr
    runs = json.loads(run_cli(["runs", "--json"], two_runs).stdout)["runs"]
    b, a = runs[0]["id"], runs[1]["id"]
    r = run_cli(["report", b, "--against", a, "-o", str(out), "--json"], two_runs)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["against"] == a and doc["run_id"] == b and "AttnProcessor2_0" in doc["verdict"]
    html = out.read_text()
    assert "<link" not in html and "/static/" not in html and 'href="/' not in html and "<form" not in html
    browser_page.goto(out.as_uri())
    assert "attention processor" in browser_page.locator("#verdict").inner_text()
    assert browser_page.locator("#dflame .fr").count() > 20 and browser_page.errors == []
    browser_page.screenshot(path=str(shots(tmp_path) / "report_against.png"), full_page=True)
