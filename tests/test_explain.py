"""Explain slow repeats and suggest what to trace, on programs with planted causes."""

import json
import sys

import numpy as np
import pytest
from conftest import PROGRAMS, run_cli

from stepscope.analysis.explain import classify, shape_of
from stepscope.store import Store
from stepscope.store.reader import load_run

UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"


def test_robust_rule_and_shapes():
    d = np.array([20, 21, 20, 80, 20, 19, 21, 80, 20, 20, 21, 79], dtype=float) * 1e6
    mask, med, rule = classify(d)
    assert np.nonzero(mask)[0].tolist() == [3, 7, 11] and med == 20.5e6 and "MAD" in rule
    assert shape_of([3, 7, 11], 12) == "every 4"
    assert shape_of([0], 12) == "first"
    assert shape_of([2, 5, 6], 12) == "irregular"
    assert shape_of([], 12) == "none"
    flat = np.full(10, 50e6) + np.arange(10) * 1e4  # a very regular loop: nothing is slow
    assert not classify(flat)[0].any()


def test_planted_costly_iterations_are_named(tmp_path):
    # (a busy machine can wake a 20 ms sleep late enough to make one more repeat slow: the run is then recorded again,
    # at most 4 times in all, each in its own store)
    for attempt in range(4):
        store = tmp_path / f"store{attempt}"
        r = run_cli(["run", "-q", "--hz", "499", "--trace", "__main__.step", "--", sys.executable,
                     str(PROGRAMS / "repeats.py")], store)
        assert r.returncode == 0, r.stderr
        r = run_cli(["explain", "--json"], store)
        assert r.returncode == 0, r.stderr
        e = json.loads(r.stdout)["explanation"]
        if e["shape"] == "every 4":
            break
    assert e["unit"] == "__main__.step" and e["shape"] == "every 4"
    assert [x["index"] for x in e["repeats"] if x["group"] == "slow"] == [3, 7, 11]
    top = e["causes"][0]
    assert top["function"] == "__main__.costly" and 0.8 <= top["share_of_gap"] <= 1.2, e["causes"]
    assert e["entry"]["function"] == "__main__.costly"
    text = run_cli(["explain", "--span", "step"], store).stdout
    assert "every 4th repeat is slower" in text and "__main__.costly" in text


def test_too_few_samples_says_which_rate(store):
    r = run_cli(["run", "-q", "--hz", "5", "--trace", "__main__.step", "--", sys.executable, str(PROGRAMS / "repeats.py")], store)
    assert r.returncode == 0
    e = json.loads(run_cli(["explain", "--json"], store).stdout)["explanation"]
    assert not e["enough_samples"] and e["causes"] == [] and "--hz" in e["advice"]


def test_repeats_too_short_for_any_rate_say_trace_inside(tmp_path):
    """Repeats of a few microseconds hold no samples at any rate: the advice says to trace what they call, not to
    record at a higher rate."""
    prog = tmp_path / "short.py"
    prog.write_text("def step(i):\n    return sum(range(2000 if i % 4 == 3 else 100))\n\n"
                    "for i in range(400):\n    step(i)\n")
    store = tmp_path / "store"
    assert run_cli(["run", "-q", "--trace", "__main__.step", "--", sys.executable, str(prog)], store).returncode == 0
    e = json.loads(run_cli(["explain", "--json"], store).stdout)["explanation"]
    assert not e["enough_samples"] and e["causes"] == [], e
    assert "shorter than one sample period" in e["advice"] and "--trace" in e["advice"] and "--hz" not in e["advice"]


def test_explain_errors_are_one_line(store):
    assert run_cli(["run", "-q", "--", sys.executable, str(PROGRAMS / "behaviour.py")], store).returncode == 0
    r = run_cli(["explain"], store)
    assert r.returncode == 2 and r.stderr.startswith("stepscope: error: no span name has 3 or more calls")
    r = run_cli(["explain", "--span", "nope"], store)
    assert r.returncode == 2 and "--span nope" in r.stderr


@pytest.fixture(scope="module")
def sd_slow(tmp_path_factory):
    pytest.importorskip("diffusers")
    # On a busy machine the fast steps can vary by more than explain's noise bound, and it rightly says "too noisy
    # to call" instead of marking any step: the run is then recorded again (at most 3 times), as a user would
    for attempt in range(3):
        store = tmp_path_factory.mktemp("sdslow") / "store"
        r = run_cli(["run", "-q", "--hz", "199", "--trace", UNET, "--trace",
                     "diffusers.schedulers.scheduling_ddim.DDIMScheduler.step", "--", sys.executable,
                     str(PROGRAMS / "sd_slow_steps.py"), "--steps", "8", "--slow", "2,5"], store)
        assert r.returncode == 0, r.stderr
        rule = json.loads(run_cli(["explain", "--json"], store).stdout)["explanation"]["rule"]
        if "too noisy to call" not in rule:
            break
    return store


def test_sd_slow_steps_found_with_their_cause(sd_slow):
    e = json.loads(run_cli(["explain", "--json"], sd_slow).stdout)["explanation"]
    assert e["unit"] == "step"
    slow = [x["label"] for x in e["repeats"] if x["group"] == "slow"]
    assert "step 2" in slow and "step 5" in slow, slow
    assert e["entry"]["function"] in ("__main__.heavy_postprocess", "main.<locals>.on_step_end", "__main__.main.<locals>.on_step_end")
    names = [c["function"] for c in e["causes"]]
    assert "__main__.heavy_postprocess" in names
    assert sum(c["share_of_gap"] for c in e["causes"] if c["function"] == "__main__.heavy_postprocess") >= 0.5


def test_sd_first_step_cause_is_reported_with_frames(sd_slow):
    e = json.loads(run_cli(["explain", "--json", "--slow", "0"], sd_slow).stdout)["explanation"]
    assert e["enough_samples"] and e["causes"]
    # a line, or why none: a short traced function (DDIMScheduler.step) sampled only in its probe calls on a busy
    # machine is a cause with no line (test_a_cause_sampled_on_no_line_says_why)
    assert all(c["file"] and (c["line"] > 0 or c["line_note"].startswith("no line: ")) for c in e["causes"])


def test_suggest_names_untraced_functions_inside_spans(sd_slow):
    r = run_cli(["suggest", "--json", "--top", "5"], sd_slow)
    doc = json.loads(r.stdout)
    names = doc["functions_to_trace"]
    assert names and UNET not in names
    assert all("<" not in n and not n.startswith(("importlib", "stepscope.record.tracing")) for n in names)
    assert "torch.nn.modules.module.Module._call_impl" not in names
    assert all(0 < s["share"] <= 1 for s in doc["suggestions"])
    text = run_cli(["suggest"], sd_slow).stdout
    assert "--trace " + names[0] in text and "functions_to_trace=[" in text


def test_auto_trace_runs_twice_and_links_the_runs(tmp_path):
    pytest.importorskip("diffusers")
    store = tmp_path / "store"
    r = run_cli(["run", "--auto-trace", "3", "--json", "--", sys.executable, str(PROGRAMS / "sd_slow_steps.py"),
                 "--steps", "4", "--slow", "1,3"], store)  # two slow steps: heavy_postprocess outweighs a UNet slowed by a busy machine
    assert r.returncode == 0, r.stderr
    runs = json.loads(run_cli(["runs", "--json"], store).stdout)["runs"]
    assert len(runs) == 2
    second, first = runs
    added = second["settings"]["extra"]["auto_trace"]["added"]
    assert second["settings"]["extra"]["auto_trace"]["first_run"] == first["id"]
    assert first["settings"]["extra"]["auto_trace"]["second_run"] == second["id"]
    assert len(added) == 3 and "__main__.heavy_postprocess" in added
    data = load_run(Store(store), second["id"])
    assert {s.name for s in data.spans if s.op != "transaction"} == set(added)


def test_repeats_as_columns_read_as_the_repeat_objects_did():
    """``repeats_of`` gives columns (a million repeats: no object each); what indexing, ``slow``, the JSON form and
    the report's view read from them is what the list of ``Repeat`` held: labels (with a span's step), groups,
    samples, the page's rows (the first ones, then the slowest slow ones, in order)."""
    import dataclasses

    from stepscope.analysis.explain import Repeat, explain, repeats_of
    from stepscope.analysis.steptable import HEAD_ROWS, MAX_ROWS
    from stepscope.core.model import Profile, Run, RunData, Span
    from stepscope.analysis.calltree import ProfileIndex
    from stepscope.output.html.view import _explain_view

    rng = np.random.default_rng(3)
    n = 3000
    dur = rng.integers(900, 1100, n)
    dur[rng.choice(n, 1000, replace=False)] *= rng.integers(3, 9, 1000)  # slow ones, many with equal durations
    start = np.concatenate([[0], np.cumsum(dur + 50)[:-1]]) + 1000
    spans = [Span(1, None, "run", "transaction", 0, int(start[-1] + dur[-1] + 10), 1)]
    spans += [Span(k + 2, 1, "__main__.f", "function", int(a), int(a + d), 1,
                   attrs={"diffusion.step": k % 7} if k % 500 == 3 else {}) for k, (a, d) in enumerate(zip(start, dur))]
    data = RunData(Run("r", ["x"], start_ns=0, end_ns=spans[0].end_ns), spans, Profile(hz=100))
    reps = repeats_of(data, "f")
    old = [Repeat(i, f"#{i}" + (f" step {s.attrs['diffusion.step']}" if "diffusion.step" in s.attrs else ""),
                  s.end_ns - s.start_ns, s.start_ns, s.end_ns, s.thread_id) for i, s in enumerate(spans[1:])]
    assert list(reps) == old and reps[503] == old[503] and reps[-1] == old[-1] and reps[10:13] == old[10:13]
    e = explain(data, "f")
    groups = [r.group for r in e.repeats]
    assert groups.count("slow") >= 900 and set(groups) <= {"slow", "fast", "warm-up"}
    assert [r.index for r in e.slow] == [i for i, g in enumerate(groups) if g == "slow"]
    assert e.slow[0].label == e.repeats[e.slow[0].index].label and len(e.slow) == groups.count("slow")
    d = e.to_dict()
    assert d["repeats"] == [dataclasses.asdict(r) for r in e.repeats]
    assert {k: v for k, v in d.items() if k != "repeats"} == {
        k: v for k, v in dataclasses.asdict(dataclasses.replace(e, repeats=[])).items() if k != "repeats"}
    # the report's table (its own explain: the default unit, so no span with a step here)
    plain = dataclasses.replace(data, spans=[dataclasses.replace(s, attrs={}) for s in spans])
    view = _explain_view(plain, ProfileIndex(plain.profile), 0, {1: 0})
    objs = list(explain(plain).repeats)
    assert [r.group for r in objs] == groups
    more = sorted((r for r in objs[HEAD_ROWS:] if r.group in ("slow", "warm-up")), key=lambda r: -r.duration_ns)
    shown = objs[:HEAD_ROWS] + sorted(more[:MAX_ROWS - HEAD_ROWS], key=lambda r: r.index)
    assert [r["index"] for r in view["repeats"]] == [r.index for r in shown]
    assert view["repeats"][5]["label"] == "#5" and view["slow_total"] == groups.count("slow")
    assert view["repeats_total"] == n and len(view["repeats"]) == MAX_ROWS < HEAD_ROWS + len(more)


def test_a_cause_sampled_on_no_line_says_why():
    """Python 3.11 runs the probe calls it adds to a traced function on no line: a traced function sampled only
    there (a short DDIMScheduler.step whose first call's probe took longer on a busy machine) is a cause with
    line 0, and the cause says why; another function seen on no line says so too. A function seen on a line
    carries it."""
    from stepscope.analysis.explain import NO_LINE_OTHER, NO_LINE_TRACED, explain
    from stepscope.core.model import Frame, Profile, Run, RunData, Span
    from stepscope.output.terminal.explain import print_explanation
    from rich.console import Console

    ms = 1_000_000
    durs = [10, 10, 10, 40, 10, 10, 10, 10]  # repeat 3 slow: 30 ms more
    starts = np.concatenate([[0], np.cumsum(np.array(durs) + 1)[:-1]]) * ms + ms
    spans = [Span(1, None, "run", "transaction", 0, int(starts[-1]) + 20 * ms, 1)]
    spans += [Span(k + 2, 1, "m.step", "function", int(a), int(a) + d * ms, 1) for k, (a, d) in enumerate(zip(starts, durs))]
    frames = [Frame("<module>", "m", "m.py", 1), Frame("step", "m", "m.py", 0), Frame("work", "m", "m.py", 7),
              Frame("gen", "m", "m.py", 0)]
    stacks = [(0, 1, 2), (0, 1), (0, 1, 3)]  # in work (a line); in step's probe calls (no line); in gen (no line)
    t, stack = [], []
    for k, (a, d) in enumerate(zip(starts, durs)):
        for j in range(d):  # a sample each ms
            t.append(int(a) + j * ms + ms // 2)
            stack.append(0 if j < 10 else 1 if j < 30 else 2)
    p = Profile(frames=frames, stacks=stacks, sample_t_ns=t, sample_thread=[1] * len(t), sample_stack=stack,
                hz=1000.0, thread_names={1: "MainThread"})
    data = RunData(Run("r", ["x"], start_ns=0, end_ns=spans[0].end_ns), spans, p)
    e = explain(data, "m.step")
    assert [r.index for r in e.slow] == [3]
    by = {c.function: c for c in e.causes}
    assert by["m.step"].line == 0 and by["m.step"].line_note == NO_LINE_TRACED
    assert by["m.gen"].line == 0 and by["m.gen"].line_note == NO_LINE_OTHER
    assert all(c.line > 0 and not c.line_note for c in e.causes if c.function not in ("m.step", "m.gen"))
    doc = e.to_dict()
    assert all(c["line"] > 0 or c["line_note"] for c in doc["causes"])
    console = Console(width=200, record=True)
    print_explanation(e, console)
    out = console.export_text()
    assert "m.py (no line: sampled only in stepscope's probe calls" in out and "m.py:0" not in out
