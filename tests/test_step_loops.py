"""Steps beyond diffusers (issue 38): sampler loops' iterations as steps (k-diffusion, ComfyUI's copy), ``--step``,
span labels from arguments, the ``--app comfyui`` preset's node spans and per-node tables, on stand-ins of the real
shapes (tests/programs/loops, tests/programs/comfy_standin) under the real `stepscope run`, on each interpreter."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_transparency import INTERPRETERS, NATIVE

from stepscope.serve.ingest.steps import steps_from_names
from stepscope.record.steps.loops import loop_of_def
from stepscope.core.steprules import STEP_ATTR, is_call_name, kind_of_name
from stepscope.record.spans.labels import Label, compile_label, parse_labels

SRC = Path(__file__).parent.parent / "src"
LOOPS = Path(__file__).parent / "programs" / "loops"
COMFY = Path(__file__).parent / "programs" / "comfy_standin"


def _run(store: Path, args: list, cwd: Path, python: str = sys.executable, recorder: str = "native",
         timeout: int = 180) -> tuple[subprocess.CompletedProcess, dict]:
    """``stepscope run --json ARGS -- python PROGRAM...`` with ``python``; (the process, the JSON summary)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE"))}
    env.update(PYTHONPATH=str(SRC), STEPSCOPE_STORE=str(store), STEPSCOPE_RECORDER=recorder, COLUMNS="200")
    i = args.index("--")
    cmd = [sys.executable, "-m", "stepscope", "run", "--json", "--no-memory", *args[:i], "--", python, *args[i + 1:]]
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout[p.stdout.index("{\n"):] if "{\n" in p.stdout else p.stdout.splitlines()[-1])
    return p, doc["run"]


def _recorders(python):
    return ["native", "python"] if NATIVE.get(python) else ["python"]


@pytest.mark.parametrize("python", INTERPRETERS)
def test_k_diffusion_loop_steps_find_a_slow_preview(python, tmp_path):
    """Heun (two model evaluations a step but the last) over the script's own model, its preview slow at step 5:
    10 steps numbered 0-9 in one sampler call, the model's 19 calls inside them, step 5 slow with the preview named
    in its untraced time; with both recorders."""
    for recorder in _recorders(python):
        store = tmp_path / recorder
        p, run = _run(store, ["--trace", "__main__.TinyUNet.forward", "--", "sampler_script.py", "--sampler",
                              "sample_heun", "--slow-step", "5"], LOOPS, python, recorder)
        assert "done" in p.stdout
        names = {s["name"]: s["count"] for s in run["spans"]}
        assert names["k_diffusion.sampling.sample_heun"] == 1
        assert names["k_diffusion.sampling.sample_heun step"] == 10
        assert names["__main__.TinyUNet.forward"] == 19
        steps = run["steps"]
        assert steps["kind"] == "diffusion.step"
        assert [(r["call"], r["step"]) for r in steps["rows"]] == [(0, k) for k in range(10)], recorder
        assert steps["slow_steps"] == [5] or 5 in steps["slow_steps"], steps["slow_steps"]
        row = steps["rows"][5]
        assert any(f["function"] == "__main__.preview" for f in row["fill"]), row["fill"]
        # the model's calls are inside their step, not beside it
        assert row["by_name"]["__main__.TinyUNet.forward"] > 0
        assert "k_diffusion.sampling.sample_heun step" not in steps["columns"]


def test_sampler_calls_number_their_steps_from_zero_and_explain_names_the_cause(tmp_path):
    """Two images through a sampler that calls another (no loop of its own): two calls of 6 steps each; `explain`
    on the slow step names the preview."""
    store = tmp_path / "s"
    p, run = _run(store, ["--hz", "997", "--trace", "__main__.TinyUNet.forward", "--", "sampler_script.py", "--sampler",
                          "sample_dpmpp_2m_alias", "--images", "2", "--steps", "6", "--slow-step", "3"], LOOPS)
    assert [(r["call"], r["step"]) for r in run["steps"]["rows"]] == [(c, k) for c in (0, 1) for k in range(6)]
    env = {**os.environ, "STEPSCOPE_STORE": str(store), "COLUMNS": "200", "PYTHONPATH": str(SRC)}
    ex = subprocess.run([sys.executable, "-m", "stepscope", "explain"], env=env, capture_output=True, text=True,
                        timeout=120)
    assert ex.returncode == 0, ex.stderr
    assert "Explain denoising steps" in ex.stdout and "__main__.preview" in ex.stdout, ex.stdout


def test_nothing_traced_adds_no_loop_tracing(tmp_path):
    """With nothing named, the loop rules trace nothing (the run is sampled only) and say nothing."""
    p, run = _run(tmp_path / "s", ["--", "sampler_script.py", "--steps", "3"], LOOPS)
    assert run["spans"] == [] and run["steps"] is None
    assert "not traced" not in p.stderr


@pytest.mark.parametrize("python", INTERPRETERS)
def test_step_option_and_labels(python, tmp_path):
    """``--step NAME`` makes each call a step; ``--label`` names spans from the arguments (a missing field reads
    ``?``); on each interpreter."""
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import time\n"
        "def one_step(i):\n    time.sleep(0.12 if i == 4 else 0.015)\n"
        "def work(n):\n    for i in range(n):\n        one_step(i)\n"
        "class Node:\n    def __init__(self, kind): self.kind = kind\n"
        "def run_node(node, nid, cfg=None):\n    time.sleep(0.002)\n"
        "work(8)\n"
        "for k in range(3):\n    run_node(Node('KSampler' if k else 'Loader'), str(k))\n"
        "run_node(object(), 'x')\n")
    p, run = _run(tmp_path / "s", ["--step", "__main__.one_step", "--trace", "__main__.run_node", "--label",
                                   "__main__.run_node={node.kind} #{nid}", "--", str(prog)], tmp_path, python)
    names = {s["name"]: s["count"] for s in run["spans"]}
    assert names["__main__.one_step"] == 8
    assert names["Loader #0"] == 1 and names["KSampler #1"] == 1 and names["KSampler #2"] == 1
    assert names["? #x"] == 1
    assert [r["step"] for r in run["steps"]["rows"]] == list(range(8))
    assert 4 in run["steps"]["slow_steps"]


def test_trace_file_steps_labels_and_app(tmp_path):
    """``traces.toml`` takes ``steps``, ``[labels]`` and ``app``; a bad label or an unknown app is one line naming
    the file and the field."""
    from stepscope.cli.tracefile import TraceFileError, read_trace_file

    f = tmp_path / "traces.toml"
    f.write_text('functions_to_trace = ["a.b"]\nsteps = ["pkg.loop.one"]\napp = "ComfyUI"\n'
                 '[labels]\n"execution.execute" = "{dynprompt.original_prompt[current_item][\'class_type\']}"\n')
    tf = read_trace_file(f)
    assert tf.names == ["a.b"] and tf.steps == ["pkg.loop.one"] and tf.app == "comfyui"
    assert list(tf.labels) == ["execution.execute"]
    for body, field in (('[labels]\n"x.y" = "{a()}"\n', "labels"), ('[labels]\n"x.y" = "plain"\n', "labels"),
                        ('app = "nope"\n', "app"), ('steps = "x"\n', "steps")):
        f.write_text(body)
        with pytest.raises(TraceFileError) as e:
            read_trace_file(f)
        assert str(f) in str(e.value) and "\n" not in str(e.value) and (field in str(e.value) or "--app" in str(e.value))


def test_label_templates_read_arguments_and_never_raise():
    render = compile_label("{node.kind or node.name} #{ids[k]} {table['x']}")

    class Boom:
        @property
        def kind(self):
            raise RuntimeError("no")
        name = "fallback"

    assert render({"node": Boom(), "ids": {"a": 7}, "k": "a", "table": {"x": 1}}) == "fallback #7 1"
    assert render({}) is None  # nothing readable: the function's own name stays
    assert render({"ids": [1]}) == "? #? ?"[:0] or render({"ids": [1]}) is None
    for bad in ("{f(x)}", "{a + b}", "{a[b + 1]}", "no field", "{a!r}", "{a:>3}"):
        with pytest.raises(ValueError):
            compile_label(bad)
    with pytest.raises(ValueError):
        parse_labels(["no-equals"])

    class Frame:
        f_locals = {"node": Boom()}
    assert Label("{node.name}").enter_frame(Frame()) == {"stepscope.name": "fallback"}
    assert Label("{node.kind}").enter_frame(Frame()) is None


def test_step_loop_is_the_largest_outer_loop():
    import ast

    src = ("def f(xs):\n    for a in xs[:2]:\n        pass\n    while True:\n        for b in xs:\n            y = b\n"
           "        break\n    return 1\n")
    spec = loop_of_def(ast.parse(src).body[0])
    assert (spec.head, spec.first) == (4, 5)
    assert loop_of_def(ast.parse("def g():\n    return 1\n").body[0]) is None


def test_rules_read_from_names_and_ingested_loop_spans():
    assert kind_of_name("k_diffusion.sampling.sample_euler") == "loop"
    assert kind_of_name("comfy.k_diffusion.sampling.sample_dpmpp_2m") == "loop"
    assert kind_of_name("comfy.k_diffusion.sampling.sample_dpmpp_2m step") == "step"
    assert kind_of_name("ldm.models.diffusion.ddim.DDIMSampler.ddim_sampling") == "loop"
    assert kind_of_name("mypkg.sample_euler") is None
    assert is_call_name("k_diffusion.sampling.sample_euler") and not is_call_name("k_diffusion.sampling.to_d")
    # spans of a loop sent by an SDK: each iteration span is one step, counted from 0 in each sampler call
    S = "k_diffusion.sampling.sample_euler"
    spans = [(1, None, S, 0, 1), (2, 1, S + " step", 1, 1), (3, 1, S + " step", 2, 1), (4, None, S, 10, 1),
             (5, 4, S + " step", 11, 1)]
    assert steps_from_names(spans) == {2: 0, 3: 1, 5: 0}


@pytest.mark.parametrize("python", INTERPRETERS)
def test_comfyui_preset_nodes_prompts_and_steps(python, tmp_path):
    """``--app comfyui`` on the stand-in server (two prompts, a new seed each, the preview slow at step 5 of the
    second): node spans by type and id (op node), the per-node table (the loader ran once and was cached after),
    the prompts (4 nodes cached in the second), 2 x 8 steps with the slow one's cause named."""
    p, run = _run(tmp_path / "s", ["--app", "comfyui", "--", "main.py", "--slow-step", "5"], COMFY, python)
    assert "prompts done: 2" in p.stdout
    nodes = {n["name"]: n for n in run["nodes"]["nodes"]}
    assert set(nodes) == {"CheckpointLoaderSimple #4", "CLIPTextEncode #6", "CLIPTextEncode #7",
                          "EmptyLatentImage #5", "KSampler #3", "VAEDecode #8", "SaveImage #9"}
    assert nodes["KSampler #3"]["count"] == 2 and nodes["KSampler #3"]["type"] == "KSampler"
    assert nodes["CheckpointLoaderSimple #4"]["count"] == 1 and nodes["SaveImage #9"]["count"] == 2
    assert run["nodes"]["nodes"][0]["name"] == "KSampler #3"  # the most time
    prompts = run["nodes"]["prompts"]
    assert [(r["prompt_id"], r["ran"], r["cached"]) for r in prompts] == [("prompt-0", 7, 0), ("prompt-1", 3, 4)]
    rows = run["steps"]["rows"]
    assert [(r["call"], r["step"]) for r in rows] == [(c, k) for c in (0, 1) for k in range(8)]
    slow = [r for r in rows if r["slow"]]
    assert (1, 5) in [(r["call"], r["step"]) for r in slow]
    r = next(r for r in slow if (r["call"], r["step"]) == (1, 5))
    assert any("preview" in (f["via"] or "") or "preview" in f["function"] for f in r["fill"]), r["fill"]
    assert "--app comfyui" not in run["unresolved"]


def test_comfyui_preset_says_what_this_version_lacks(tmp_path):
    """A ComfyUI whose sd module lacks a name of the preset: one line for the preset, the rest traced."""
    app = tmp_path / "app"
    import shutil

    shutil.copytree(COMFY, app)
    sd = app / "comfy" / "sd.py"
    sd.write_text(sd.read_text().replace("def encode_from_tokens(", "def encode_tokens("))
    (app / "nodes.py").write_text((app / "nodes.py").read_text().replace("encode_from_tokens", "encode_tokens"))
    p, run = _run(tmp_path / "s", ["--app", "comfyui", "--", "main.py", "--prompts", "1", "--steps", "2"], app)
    line = run["unresolved"]["--app comfyui"]
    assert "comfy.sd.CLIP.encode_from_tokens" in line and "lacks 1 of" in line
    assert not [k for k in run["unresolved"] if k.startswith("comfy.")]
    assert any(n["name"] == "KSampler #3" for n in run["nodes"]["nodes"])


KDIFF = Path(__file__).parent / "programs" / "kdiff"


@pytest.mark.skipif(importlib.util.find_spec("k_diffusion") is None, reason="k-diffusion not installed (make test "
                    "installs it)")
def test_real_k_diffusion_sampler_over_a_torch_model(tmp_path):
    """The k-diffusion package's DPM++ 2M over a small torch denoiser (not diffusers), its preview slow at step 6:
    10 steps, step 6 slow, the preview named in it, and `explain` names it too."""
    store = tmp_path / "s"
    p, run = _run(store, ["--hz", "499", "--trace", "__main__.TinyUNet.forward", "--", "kdiff_script.py",
                          "--slow-step", "6"], KDIFF)
    assert "done" in p.stdout
    names = {s["name"]: s["count"] for s in run["spans"]}
    assert names["k_diffusion.sampling.sample_dpmpp_2m step"] == 10 and names["__main__.TinyUNet.forward"] == 10
    assert [r["step"] for r in run["steps"]["rows"]] == list(range(10))
    assert 6 in run["steps"]["slow_steps"]
    assert any("preview" in f["function"] for f in run["steps"]["rows"][6]["fill"])
    env = {**os.environ, "STEPSCOPE_STORE": str(store), "COLUMNS": "200", "PYTHONPATH": str(SRC)}
    ex = subprocess.run([sys.executable, "-m", "stepscope", "explain"], env=env, capture_output=True, text=True,
                        timeout=120)
    assert "step 6" in ex.stdout and "preview" in ex.stdout, ex.stdout


def test_report_shows_nodes_prompts_and_named_calls(tmp_path, browser_page):
    """The report of a `--app comfyui` run: the Nodes and Prompts tables, the step table's calls named by prompt and
    node; a click on a node row selects its slowest run."""
    store = tmp_path / "s"
    _run(store, ["--app", "comfyui", "--", "main.py", "--slow-step", "5"], COMFY)
    out = tmp_path / "r.html"
    env = {**os.environ, "STEPSCOPE_STORE": str(store), "PYTHONPATH": str(SRC)}
    subprocess.run([sys.executable, "-m", "stepscope", "report", "-o", str(out)], env=env, check=True, timeout=120,
                   capture_output=True)
    page = browser_page
    page.goto(out.as_uri())
    page.wait_for_function("window.stepscopeReport !== undefined")
    assert page.locator("#nodes-section").is_visible()
    rows = page.locator("#nodes tr.clickable")
    assert rows.count() == 7 and "KSampler #3" in rows.nth(0).inner_text()
    assert page.locator("#prompts tr.clickable").count() == 2
    assert "prompt 1 · KSampler #3" in page.locator("#steps").inner_text()
    rows.nth(0).click()
    assert "KSampler #3" in page.evaluate("window.stepscopeReport.flameTitle()")
    assert not page.errors


def test_bench_times_the_steps_of_a_recorded_command(tmp_path):
    """``stepscope bench --trace NAME -- command``: each run recorded, its sampler loop's steps timed per run
    (``step_median_s``: the model's 4 ms a step), the scratch runs not kept in the bench's store."""
    env = {**os.environ, "STEPSCOPE_STORE": str(tmp_path / "s"), "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    p = subprocess.run([sys.executable, "-m", "stepscope", "bench", "--json", "--repeats", "2", "--warmup", "0",
                        "--trace", "__main__.TinyUNet.forward", "--", sys.executable, "sampler_script.py", "--steps",
                        "5"], cwd=LOOPS, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)["verdict"]["rows"][0]
    assert 0.003 < row["step_median_s"] < 0.05, row
    runs = subprocess.run([sys.executable, "-m", "stepscope", "runs", "--json"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert json.loads(runs.stdout or "[]") in ([], {"runs": []}), runs.stdout


@pytest.mark.parametrize("python", INTERPRETERS)
def test_a_loop_head_over_several_lines(python, tmp_path):
    """``for ctx.i, ctx.sigma in enumerate(\\n sigmas[:-1]\\n):``: every iteration is a step on each interpreter."""
    p, run = _run(tmp_path / "s", ["--trace", "__main__.TinyUNet.forward", "--", "sampler_script.py", "--sampler",
                                   "sample_state_loop", "--steps", "6"], LOOPS, python)
    names = {s["name"]: s["count"] for s in run["spans"]}
    assert names["k_diffusion.sampling.sample_state_loop step"] == 6 and names["__main__.TinyUNet.forward"] == 6
    assert [r["step"] for r in run["steps"]["rows"]] == list(range(6))
