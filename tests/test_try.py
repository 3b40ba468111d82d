"""`stepscope try`: fixes applied to real, unmodified user scripts on the tiny SD pipeline (small images, few steps),
measured against the baseline; what `suggest` and the report say about fixes. No assertion on speed: the figures
must exist and be consistent (a loaded 2-core machine cannot tell a small speed-up reliably)."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_env, run_cli

PROGRAMS = Path(__file__).parent / "programs" / "try"
PY = sys.executable


def _json(p: subprocess.CompletedProcess) -> dict:
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _plain_stdout(script: str, *args: str) -> str:
    """The program's own output without stepscope."""
    env = cli_env(Path("/nonexistent"))
    return subprocess.run([PY, str(PROGRAMS / script), *args], env=env, capture_output=True, text=True, timeout=300,
                          check=True).stdout


def _row(doc: dict, label: str) -> dict:
    return next(r for r in doc["verdict"]["rows"] if r["label"] == label)


def _consistent(row: dict, repeats: int) -> None:
    call, step = row["call"], row["step"]
    assert call["n"] == repeats and step["n"] == repeats
    for st in (call, step):
        assert 0 < st["ci_low"] <= st["median"] <= st["ci_high"] and st["cv"] >= 0
    assert row["peak_bytes"] > 0 and row["warmup_s"] > 0
    if row["index"]:
        for ch in (row["call_change"], row["step_change"]):
            assert ch["ci_low"] <= ch["change"] <= ch["ci_high"]
            assert ch["significant"] == (not ch["ci_low"] <= 0 <= ch["ci_high"])


@pytest.fixture(scope="module")
def classic(tmp_path_factory):
    store = tmp_path_factory.mktemp("classic") / "store"
    p = run_cli(["try", "--fix", "sdpa,vae-slicing,fuse-qkv", "--repeats", "4", "--json", "--", PY,
                 str(PROGRAMS / "classic.py")], store)
    return store, _json(p)


def test_classic_processors_sdpa_measured_with_ci_and_image_change(classic):
    store, doc = classic
    v = doc["verdict"]
    assert [r["label"] for r in v["rows"]] == ["baseline", "sdpa"]
    assert set(v["not_applicable"]) == {"vae-slicing", "fuse-qkv"}
    assert "one image per call" in v["not_applicable"]["vae-slicing"]
    assert "SDPA processors" in v["not_applicable"]["fuse-qkv"]
    base, sdpa = _row(doc, "baseline"), _row(doc, "sdpa")
    _consistent(base, 4)
    _consistent(sdpa, 4)
    assert "AttnProcessor2_0" in sdpa["applied"]["sdpa"]
    out = sdpa["output"]
    assert out["kind"] == "image" and out["shape"] == [1, 32, 32, 3]
    assert math.isfinite(out["max_abs_diff"]) and 0 <= out["max_abs_diff"] < 0.05 and out["psnr_db"] > 30
    # one timed step per scheduler step after the first: 4 steps, 3 intervals per call
    runs = [r for r in doc["bench"]["runs"] if r["config"] == 1 and not r["warmup"]]
    assert len(runs) == 4 and all(len(r["steps_s"]) == 3 for r in runs)
    rec = v["recommendation"]
    if v["recommended"] is not None:
        assert rec.startswith("sdpa: a denoising step ") and "max |diff|" in rec and "peak memory" in rec
    else:
        assert rec.startswith("no configuration measured significantly faster")
    assert Path(doc["plot"]).exists()


def test_the_fix_leaves_the_programs_own_output_alone(classic):
    store, doc = classic
    plain = _plain_stdout("classic.py")
    assert plain.startswith("pipeline ready\nimage (1, 32, 32, 3)")
    folder = Path(doc["bench"]["notes"]["try"]["folder"])
    assert (folder / "0.stdout").read_text() == plain  # the measured calls printed nothing of their own
    assert (folder / "1.stdout").read_text() == plain
    assert _row(doc, "sdpa")["stdout_same"] is True
    assert doc["bench"]["notes"]["try"]["exit"] == {"0": 0, "1": 0}


def test_stored_as_a_benchmark_that_bench_show_reads(classic):
    store, doc = classic
    p = run_cli(["bench", "show", doc["bench_id"], "--json"], store)
    shown = _json(p)
    assert shown["bench"]["spec"]["kind"] == "try" and shown["bench"]["labels"] == ["baseline", "sdpa"]
    assert [r["stats"]["n"] for r in shown["verdict"]["rows"]] == [4, 4]
    p = run_cli(["bench", "show", doc["bench_id"]], store)
    assert p.returncode == 0 and "recommendation:" in p.stdout and "sdpa" in p.stdout  # the try table


def test_a_pipeline_already_on_sdpa_and_compile_on_the_cpu(tmp_path):
    store = tmp_path / "store"
    p = run_cli(["try", "--fix", "sdpa,compile,fp16", "--compile-mode", "eager", "--repeats", "2", "--", PY,
                 str(PROGRAMS / "on_sdpa.py")], store)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "not applicable: sdpa: already on SDPA (AttnProcessor2_0 x" in p.stdout
    assert "not applicable: fp16: float16 on the CPU" in p.stdout
    assert re.search(r"\(compile -?\d+\.\ds\)", p.stdout)  # the warm-up with the compile time apart
    doc = _json(run_cli(["bench", "show", "--json"], store))
    b = doc["bench"]
    assert b["labels"] == ["baseline", "compile"]
    assert "torch.compile(pipe.unet, mode=eager)" in b["notes"]["try"]["applied"]["1"]["compile"]
    from stepscope.fixes.verdict import try_verdict

    v = try_verdict(b)
    comp = v.rows[1]
    assert comp.call.n == 2 and comp.step.n == 2 and comp.warmup_s > 0
    assert comp.compile_s == pytest.approx(comp.warmup_s - comp.call.median)
    assert comp.output["kind"] == "tensor" and comp.output["shape"] == [1, 4, 16, 16]
    assert math.isfinite(comp.output["max_abs_diff"])
    assert (Path(b["notes"]["try"]["folder"]) / "1.stdout").read_text() == "latents (1, 4, 16, 16)\n"


def test_pipeline_built_in_a_function_and_called_twice(tmp_path):
    store = tmp_path / "store"
    p = run_cli(["try", "--fix", "sdpa,sync-free-scheduler", "--repeats", "2", "--no-combine", "--json", "--", PY,
                 str(PROGRAMS / "in_function.py")], store)
    doc = _json(p)
    assert [r["label"] for r in doc["verdict"]["rows"]] == ["baseline", "sdpa", "sync-free-scheduler"]
    for r in doc["verdict"]["rows"]:
        _consistent(r, 2)
    folder = Path(doc["bench"]["notes"]["try"]["folder"])
    plain = _plain_stdout("in_function.py")
    # both of the program's calls ran once each (the measured calls' callback output went nowhere)
    assert plain.count("step ") == 6 and (folder / "0.stdout").read_text() == plain
    fixed = (folder / "1.stdout").read_text()
    assert fixed.count("step ") == 6 and fixed.endswith("processors: ['AttnProcessor2_0']\n")  # the program's pipeline
    assert fixed.replace("AttnProcessor2_0", "AttnProcessor") == plain
    assert (folder / "2.stdout").read_text() == plain
    assert "set_begin_index(0)" in doc["bench"]["notes"]["try"]["applied"]["2"]["sync-free-scheduler"]
    assert _row(doc, "sync-free-scheduler")["output"]["max_abs_diff"] == 0.0  # the same steps, the same image


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    store = tmp_path / "store"
    p = run_cli(["try", "--fix", "sdpa,turbo", "--", PY, str(PROGRAMS / "classic.py")], store)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0
    assert "--fix: unknown fix 'turbo'" in p.stderr and "Traceback" not in p.stderr
    p = run_cli(["try", "--fix", "compile", "--compile-mode", "fast", "--", PY, "x.py"], store)
    assert p.returncode == 2 and "--compile-mode" in p.stderr and p.stderr.strip().count("\n") == 0
    p = run_cli(["try", "--fix", "sdpa"], store)
    assert p.returncode == 2 and "no program" in p.stderr
    p = run_cli(["try", "--fix", "sdpa", "--", "/bin/ls"], store)
    assert p.returncode == 2 and "not a Python interpreter" in p.stderr
    script = tmp_path / "nopipe.py"
    script.write_text("print('no pipeline here')\n")
    p = run_cli(["try", "--fix", "sdpa", "--", PY, str(script)], store)
    assert p.returncode == 1 and "before its first diffusers pipeline call" in p.stderr


def test_suggest_and_the_report_name_the_fixes_that_apply(tmp_path, browser_page):
    store = tmp_path / "store"
    call = "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.StableDiffusionPipeline.__call__"
    p = run_cli(["run", "-q", "--trace", call, "--", PY, str(PROGRAMS / "classic.py")], store)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = _json(run_cli(["suggest", "--json"], store))
    fixes = {h["fix"]: h["why"] for h in doc["fixes"]}
    assert list(fixes) == ["sdpa"] and "AttnProcessor x" in fixes["sdpa"]
    assert doc["try_command"].startswith("stepscope try --fix sdpa -- ") and doc["try_command"].endswith("classic.py")
    text = run_cli(["suggest"], store).stdout
    assert "Fixes that apply to this run" in text and "stepscope try --fix sdpa --" in text
    from stepscope.output.html.view import build_view
    from stepscope.store.db import Store
    from stepscope.store.reader import load_run

    view = build_view(load_run(Store(store), None))
    assert view["fixes"]["hints"][0]["fix"] == "sdpa" and view["fixes"]["command"] == doc["try_command"]
    # the report's first screen says it (in Chromium: the note under the verdict)
    html = tmp_path / "report.html"
    assert run_cli(["report", "-o", str(html)], store).returncode == 0
    browser_page.goto(html.as_uri())
    browser_page.wait_for_function("!document.getElementById('fix-note').hidden")
    note = browser_page.locator("#fix-note").inner_text()
    assert note.startswith("Fixes that apply to this run: sdpa (classic attention processors") and doc["try_command"] in note
    assert browser_page.errors == []


def _figures(row: dict) -> list[str]:
    """What the try page shows of a configuration (the terminal's figures, as the page formats them)."""
    step, call = row["step"], row["call"]
    out = [row["label"], f"{1e3 * step['median']:.1f} ms", f"{1e3 * step['ci_low']:.1f}–{1e3 * step['ci_high']:.1f}",
           f"{call['median']:.3f} s", f"{call['ci_low']:.3f}–{call['ci_high']:.3f}", f"{row['peak_bytes'] / 2**20:,.0f} MiB",
           f"{row['warmup_s']:.2f} s"]
    if row["index"]:
        for ch in (row["step_change"], row["call_change"]):
            out += [f"{100 * ch['change']:+.1f}%", f"{100 * ch['ci_low']:+.1f} .. {100 * ch['ci_high']:+.1f}%"]
        out += [f"({100 * row['peak_change']:+.0f}%)", f"{row['output']['max_abs_diff']:.3g}",
                f"{row['output']['psnr_db']:.1f} dB"]
    return out


def test_the_try_result_in_the_web_ui_bench_show_html_and_the_plot(classic, tmp_path, browser_page):
    import html as htmlmod
    import os
    import struct

    from serve_helpers import Server

    from stepscope.fixes.verdict import try_verdict, verdict_word
    from stepscope.store import bench as bench_store
    from stepscope.store.db import Store

    store, doc = classic
    v, bid = doc["verdict"], doc["bench_id"]
    words = [verdict_word(r) for r in try_verdict(bench_store.load(Store(store), bid)).rows]
    assert words[0] == "baseline" and words[1] in ("faster", "faster, more memory", "slower", "no significant change")
    srv = Server(store)
    try:
        status, body, _ = srv.get("/bench")
        listing = htmlmod.unescape(body.decode())
        assert status == 200 and bid in listing and ">try<" in listing and "classic.py" in listing
        assert v["recommendation"] in listing
        status, body, _ = srv.get(f"/bench/{bid}")
        page = htmlmod.unescape(body.decode())
        assert status == 200 and 'id="try-verdict"' in page
        for row, word in zip(v["rows"], words):
            tr = page[page.index(f'<tr data-config="{row["index"]}">'):]
            tr = tr[:tr.index("</tr>")]
            for fig in _figures(row) + [word]:
                assert fig in tr, (fig, tr)
        assert f"Recommendation:</b> {v['recommendation']}" in page
        for fix, why in v["not_applicable"].items():
            assert f"<code>{fix}</code>: {why}" in page
        status, body, _ = srv.get(f"/api/bench/{bid}")
        api = json.loads(body)
        assert status == 200 and api["try"]["rows"] == v["rows"] and api["try"]["recommendation"] == v["recommendation"]
        status, png, _ = srv.get(f"/bench/{bid}/plot.png")
        # two panels (the step, the call): twice the width of a one-panel plot of two configurations
        assert status == 200 and png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1000, 480)
        page_ = browser_page
        page_.goto(f"{srv.url}/bench/{bid}")
        assert page_.locator("#recommendation").inner_text() == f"Recommendation: {v['recommendation']}"
        table = page_.locator("table#try-verdict").inner_text()
        assert "sdpa" in table and "reference" in table and words[1] in table
        assert "vae-slicing: one image per call" in page_.locator("#not-applicable").inner_text()
        page_.wait_for_function("document.getElementById('plot').complete")
        assert page_.locator("#plot").evaluate("img => img.naturalWidth") == 1000
        if os.environ.get("STEPSCOPE_SHOTS"):
            page_.screenshot(path=os.path.join(os.environ["STEPSCOPE_SHOTS"], "try-bench-page.png"), full_page=True)
        assert page_.errors == []
    finally:
        srv.stop()
    out = tmp_path / "try.html"
    p = run_cli(["bench", "show", bid, "--html", str(out)], store)
    assert p.returncode == 0, p.stderr
    standalone = htmlmod.unescape(out.read_text())
    assert 'src="data:image/png;base64,' in standalone and "<style>" in standalone
    for row in v["rows"]:
        for fig in _figures(row):
            assert fig in standalone, fig
    assert v["recommendation"] in standalone
    shown = _json(run_cli(["bench", "show", bid, "--json"], store))
    assert shown["try"]["rows"] == v["rows"]
    p = run_cli(["bench", "plot", bid, "-o", str(tmp_path / "p.png")], store)
    assert p.returncode == 0 and struct.unpack(">II", (tmp_path / "p.png").read_bytes()[16:24]) == (1000, 480)
