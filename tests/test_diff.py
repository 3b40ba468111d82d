"""`stepscope diff` on real runs of the tiny pipeline that differ by one thing each, and on ingested
Sentry runs: the diff must name that one thing first, with the right sign of the change."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import PROGRAMS, run_cli

from stepscope.analysis.envfacts import env_changes
from stepscope.analysis.runpick import program_key
from stepscope.analysis.steptable import step_table
from stepscope.store import Store
from stepscope.store.reader import load_run

PIPE = "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.StableDiffusionPipeline.__call__"
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
TRACES = ["--trace", PIPE, "--trace", UNET, "--trace", "diffusers.schedulers.scheduling_ddim.DDIMScheduler.step",
          "--trace", "diffusers.models.attention_processor.*.__call__"]


def record(store, *args):
    r = run_cli(["run", "-q", "--hz", "199", *TRACES, "--", sys.executable, str(PROGRAMS / "sd_variant.py"), "--steps", "8",
                 *args], store)
    assert r.returncode == 0, r.stderr


def diff(store, *args) -> dict:
    r = run_cli(["diff", "--json", *args], store)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def measured_sign(store, a: str, b: str) -> float:
    """The sign of the change of the median step time, from the stored spans (not from the diff)."""
    st = Store(store)
    med = [np.median([r.wall_ns for r in step_table(load_run(st, x).spans).rows]) for x in (a, b)]
    return float(np.sign(med[1] - med[0]))


def check_sign(store, d: dict) -> None:
    h = d["headline"]
    assert np.sign(h["change"]) == measured_sign(store, d["run_a"], d["run_b"])
    if h["significant"]:
        word = "slower" if (h["adjusted"] if h["adjusted"] is not None else h["change"]) > 0 else "faster"
        assert word in d["verdict"] and h["verdict"] == word, d["verdict"]
    else:
        assert d["verdict"].startswith("no significant difference"), d["verdict"]


@pytest.fixture
def sd(tmp_path):
    pytest.importorskip("diffusers")
    return tmp_path / "store"


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A store holding one run of the variant program as it is (``--threads 1``), recorded once for the tests that
    compare against it: each gets a copy (``from_plain``)."""
    pytest.importorskip("diffusers")
    store = tmp_path_factory.mktemp("plain") / "store"
    record(store, "--threads", "1")
    return store


def from_plain(plain: Path, sd: Path) -> Path:
    """``sd`` made a copy of the ``plain`` store (its run first, as if recorded there)."""
    shutil.copytree(plain, sd)
    return sd


def test_attention_processor_classic_vs_sdpa(sd):
    # (beside a busy process the UNet's calls can vary too much for its own change to be significant: a fresh pair is
    # then recorded, at most 3 pairs)
    for attempt in range(3):
        record(sd, "--attn", "classic", "--threads", "1")
        record(sd, "--attn", "sdpa", "--threads", "1")
        d = diff(sd)  # default: the last two runs of the same command
        unet = [s for s in d["spans"] if s["name"].endswith("UNet2DConditionModel.forward")]
        if d["headline"]["significant"] and unet and unet[0]["significant"]:
            break
    first = d["env"][0]
    assert first["key"] == "denoiser.attention" and first["before"] == "AttnProcessor x8" and first["after"] == "AttnProcessor2_0 x8"
    assert d["unit"] == "step" and d["headline"]["n_a"] == d["headline"]["n_b"] == 8
    # the classic processor materialises the attention matrix: SDPA is faster
    assert d["headline"]["significant"] and d["headline"]["change"] < 0
    assert d["cause"]["key"] == "denoiser.attention"
    assert d["verdict"].startswith("attention processor: AttnProcessor x8 -> AttnProcessor2_0 x8: a denoising step is ")
    assert "x faster (CI " in d["verdict"]
    check_sign(sd, d)
    spans = {s["name"].rsplit(".", 2)[-2]: s for s in d["spans"]}
    assert spans["AttnProcessor"]["only_in"] == "a" and spans["UNet2DConditionModel"]["significant"]
    # where: the classic attention's own functions shrank away
    names = [f["function"] for f in d["functions"][:5]]
    assert any("AttnProcessor.__call__" in n or "get_attention_scores" in n for n in names), names
    assert d["flame"]["a_ns"] > d["flame"]["b_ns"] > 0
    text = run_cli(["diff"], sd).stdout
    assert "1. What changed in the environment" in text and "attention processor" in text
    assert "per denoising step" in text and "differential flame graph" in text and "4. verdict:" in text


def test_float32_vs_bfloat16_on_cpu(sd):
    record(sd, "--dtype", "float32", "--threads", "1")
    record(sd, "--dtype", "bfloat16", "--threads", "1")
    d = diff(sd)
    first = d["env"][0]
    assert first["key"] == "denoiser.weights" and first["before"] == "cpu float32" and first["after"] == "cpu bfloat16"
    assert {c["key"] for c in d["env"] if c["rank"] == 2} >= {"denoiser.weights", "text_encoder.weights", "vae.weights"}
    check_sign(sd, d)
    if d["headline"]["significant"]:
        assert d["verdict"].startswith("UNet2DConditionModel weights: cpu float32 -> cpu bfloat16: a denoising step is ")


def test_planted_slow_callback(sd, plain):
    from_plain(plain, sd)
    record(sd, "--threads", "1", "--slow-callback")
    d = diff(sd)
    assert d["env"][0]["key"] == "pipeline.callback" and d["env"][0]["before"] == "-"
    assert "on_step_end" in d["env"][0]["after"]
    assert d["headline"]["significant"] and d["headline"]["change"] > 0
    check_sign(sd, d)
    assert d["verdict"].startswith("step callback: - -> main.<locals>.on_step_end: a denoising step is ")
    top = d["functions"][0]
    # the sleep (150 ms a step) is sampled as the function's own time; its share of the change depends on how
    # busy the machine was for the rest of the step
    assert top["function"] == "__main__.slow_preview" and top["a_ns"] == 0 and top["b_ns"] >= 40e6, d["functions"][:3]
    assert top["share"] >= 0.25
    # the same program and arguments, the callback slow in one run only: no env change, the function is named
    record(sd, "--threads", "1", "--slow-callback")
    a, b = [r["id"] for r in json.loads(run_cli(["runs", "--json"], sd).stdout)["runs"]][1:3][::-1]
    d2 = diff(sd, b, a)  # B = the run with the callback, A = the one without, named out of order on purpose
    assert d2["run_a"] == b and d2["headline"]["change"] < 0
    check_sign(sd, d2)
    assert d2["env"][0]["key"] == "pipeline.callback" and d2["env"][0]["after"] == "-"


def test_torch_threads_one_vs_two(sd, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # no spinning pool threads on a machine others share
    record(sd, "--threads", "1")
    record(sd, "--threads", "2")
    d = diff(sd)
    assert d["env"][0]["key"] == "threads" and (d["env"][0]["before"], d["env"][0]["after"]) == ("1", "2")
    check_sign(sd, d)
    if d["headline"]["significant"]:
        assert d["verdict"].startswith("torch threads: 1 -> 2: a denoising step is ")


@pytest.mark.alone
def test_the_same_run_twice_is_no_significant_difference(sd, plain):
    # two identical runs can differ by more than their repeats' noise when the machine's speed moved between them: on
    # this project's shared 2-core VMs the same program's steps (stepscope or not) run 1.2-1.5x slower for minutes at
    # a time, with no wait, no steal and no other process to show it (a clean CI run saw three pairs in a row 1.23x
    # apart, and so did runs without stepscope here). Those steps really were slower, and the diff says so; what it
    # must not do is invent a difference between runs that ran alike. So the runs are a chain, each compared with the
    # one before (the default pair), up to six comparisons, and one must agree. The test has the machine to itself
    # (``alone``); the chain starts from the plain run recorded once for the module, maybe beside other tests.
    verdicts = []
    from_plain(plain, sd)
    for attempt in range(6):
        record(sd, "--threads", "1")
        d = diff(sd)
        assert not [c for c in d["env"] if c["rank"] <= 8], d["env"]
        verdicts.append(d["verdict"])
        if not d["headline"]["significant"]:
            break
    assert not d["headline"]["significant"] and d["cause"] is None, verdicts
    assert d["verdict"].startswith("no significant difference: a denoising step "), d["verdict"]
    assert run_cli(["diff"], sd).stdout.count("no significant difference") >= 2


def test_errors_are_one_line(sd, tmp_path):
    r = run_cli(["diff"], sd)
    assert r.returncode == 2 and r.stderr.startswith("stepscope: error: no stepscope store")
    assert run_cli(["run", "-q", "--", sys.executable, str(PROGRAMS / "behaviour.py")], sd).returncode == 0
    r = run_cli(["diff"], sd)
    assert r.returncode == 2 and "has no earlier run to compare with" in r.stderr and "Traceback" not in r.stderr
    assert run_cli(["run", "-q", "--", sys.executable, str(PROGRAMS / "behaviour.py")], sd).returncode == 0
    d = diff(sd)  # nothing repeats: the whole runs, one repeat each
    assert d["unit"] == "run" and d["headline"]["n_a"] == 1 and d["headline"]["ci_low"] is None
    assert d["verdict"].startswith("too few repeats of the whole run for a CI (1 and 1)")
    assert any("no traced name repeats in both runs" in n for n in d["notes"]) and d["samples_a"] > 0
    r = run_cli(["diff", "--span", "nope"], sd)
    assert r.returncode == 2 and "--span nope" in r.stderr
    r = run_cli(["diff", "zzz", "last"], sd)
    assert r.returncode == 2 and "no run 'zzz'" in r.stderr


def test_program_key_and_env_ranking():
    assert program_key(["/usr/bin/python3", "x.py", "--a"]) == program_key(["python", "x.py", "--b"]) == "x.py"
    assert program_key(["python3.12", "-m", "pkg.mod", "--z"]) == "-m pkg.mod"
    assert program_key(["txt2img"]) == "txt2img"
    a = {"torch": "2.3.0+cu121", "cuda": "12.1", "threads": 8, "diffusers": "0.30.0",
         "work": {"pipeline": {"args": {"num_inference_steps": 30}, "denoiser": {"class": "UNet2DConditionModel",
                                                                                 "device": "cuda:0", "dtype": "float16"}}}}
    b = {"torch": "2.3.0+cpu", "cuda": None, "threads": 8, "diffusers": "0.31.0",
         "work": {"pipeline": {"args": {"num_inference_steps": 30}, "denoiser": {"class": "UNet2DConditionModel",
                                                                                 "device": "cpu", "dtype": "float32"}}}}
    keys = [c.key for c in env_changes(a, b)]
    assert keys == ["torch.build", "cuda", "denoiser.weights", "diffusers"]
    c = env_changes(a, b)[2]
    assert (c.before, c.after) == ("cuda:0 float16", "cpu float32") and c.label == "UNet2DConditionModel weights"
    assert env_changes(a, a) == []


def _sentry_tx(event_id: str, step_ms: float, dtype: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    start = 1_795_000_000.0
    spans, t = [], start + 0.2
    pipe_id = f"{2:016x}"
    for i in range(10):
        d = step_ms * (1 + 0.03 * rng.standard_normal()) / 1e3
        spans.append({"span_id": f"{100 + i:016x}", "parent_span_id": pipe_id, "op": "function", "description": UNET,
                      "start_timestamp": t, "timestamp": t + d, "data": {"thread.id": "7"}})
        t += d + 0.001
    spans.insert(0, {"span_id": pipe_id, "parent_span_id": f"{1:016x}", "op": "function", "description": PIPE,
                     "start_timestamp": start + 0.2, "timestamp": t, "data": {"thread.id": "7"}})
    return json.dumps({"type": "transaction", "event_id": event_id, "transaction": "txt2img", "start_timestamp": start,
                       "timestamp": t + 0.01, "platform": "python", "spans": spans,
                       "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": f"{1:016x}", "op": "task",
                                              "data": {"thread.id": "7"}},
                                    "runtime": {"name": "CPython", "version": "3.12.1"},
                                    "torch": {"device": "cuda:0", "dtype": dtype}},
                       "modules": {"torch": "2.4.0+cu121", "diffusers": "0.30.0", "requests": "2.0"}}).encode()


def test_ingested_sentry_runs_diff_like_any_other(tmp_path):
    store = tmp_path / "store"
    _ingest_two(store)
    d = diff(store)
    assert d["source_a"] == d["source_b"] == "sentry" and d["unit"] == "step"
    first = d["env"][0]
    assert first["key"] == "contexts.torch.dtype" and (first["before"], first["after"]) == ("float16", "float32")
    assert d["headline"]["significant"] and d["headline"]["change"] > 1.0
    assert d["verdict"].startswith("torch.dtype: float16 -> float32: a denoising step is 2.") and "slower" in d["verdict"]
    assert any("no samples" in n for n in d["notes"])
    run = load_run(Store(store))
    assert run.run.env["modules"] == {"torch": "2.4.0+cu121", "diffusers": "0.30.0"}


def _ingest_two(store):
    from serve_helpers import auth, envelope
    from starlette.testclient import TestClient

    from stepscope.store import keys as keystore
    from stepscope.serve.web import ServerConfig, create_app

    key = keystore.add(Store(store), "1").public_key
    with TestClient(create_app(ServerConfig(store=store)), base_url="http://127.0.0.1") as c:
        for eid, ms, dtype in (("a" * 32, 50.0, "float16"), ("b" * 32, 120.0, "float32")):
            body = envelope([({"type": "transaction"}, _sentry_tx(eid, ms, dtype, len(dtype)))], {"event_id": eid})
            assert c.post("/api/1/envelope/", content=body, headers=auth(key)).status_code == 200
    runs = Store(store).list_runs()
    return runs[1].id, runs[0].id


def test_ops_and_kernels_that_appeared_or_vanished(tmp_path):
    """Both runs with a device trace (real A100 / V100 Kineto traces): kernels only in B appeared, only in
    A vanished; with one trace only, a note says why nothing is compared."""
    import shutil

    from stepscope.device.analysis import op_stats
    from stepscope.device.kineto import load

    traces = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces")
    ta, tb = os.path.join(traces, "a100_alexnet.json.gz"), os.path.join(traces, "v100_training_rank0.json.gz")
    if not (os.path.exists(ta) and os.path.exists(tb)):
        pytest.skip("../shared/traces not present")
    store = tmp_path / "store"
    a, b = _ingest_two(store)
    (store / "runs" / a).mkdir(parents=True)
    shutil.copy(ta, store / "runs" / a / "device_trace.json.gz")
    d = diff(store)
    assert d["ops"] == [] and any("only one run has a device trace" in n for n in d["notes"])
    (store / "runs" / b).mkdir(parents=True)
    shutil.copy(tb, store / "runs" / b / "device_trace.json.gz")
    d = diff(store)
    ka = {o.name for o in op_stats(load(ta), ("kernel",), 10**9)}
    kb = {o.name for o in op_stats(load(tb), ("kernel",), 10**9)}
    kernels = [o for o in d["ops"] if o["kind"] == "kernel"]
    assert kernels and {o["kind"] for o in d["ops"]} == {"op", "kernel"}
    for o in kernels:
        want = "appeared" if o["name"] not in ka else "vanished" if o["name"] not in kb else "changed"
        assert o["status"] == want
        assert (o["a_count"] == 0) == (want == "appeared") and (o["b_count"] == 0) == (want == "vanished")
    assert {"appeared", "vanished"} <= {o["status"] for o in kernels}
    text = run_cli(["diff"], store).stdout
    assert "device ops and kernels" in text and "appeared" in text and "vanished" in text


def test_facts_are_read_without_importing_torch_and_see_compile():
    import subprocess

    code = ("import sys, stepscope.record.session as s; env = s.environment(); "
            "print(sorted(k for k in ('torch', 'diffusers') if k in sys.modules), 'torch' in env)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["[]", "False"]
    torch = pytest.importorskip("torch")

    from stepscope.record.envinfo import environment
    from stepscope.record.steps.workfacts import module_facts

    lin = torch.nn.Linear(2, 2).to(torch.bfloat16)
    f = module_facts(torch.compile(lin, backend="eager"))  # wrapped, not compiled until called
    assert f == {"class": "Linear", "compiled": True, "device": "cpu", "dtype": "bfloat16", "offload": False}
    assert module_facts(lin)["compiled"] is False and module_facts(None) == {}
    env = environment()
    assert env["torch"] == torch.__version__ and env["threads"] == torch.get_num_threads()
    assert env["torch_flags"]["sdpa_math"] in (True, False) and "float32_matmul_precision" in env["torch_flags"]
    pytest.importorskip("diffusers")
    from stepscope.pipelines.sd import build_pipeline

    unet = build_pipeline("tiny").unet
    assert module_facts(unet, attention=True)["attention"] == {"AttnProcessor2_0": 8}


def _synthetic(run_id: str, steps: int, step_ms: float, seed: int, env: dict | None = None):
    from stepscope.core.model import Profile, Run, RunData, Span

    rng = np.random.default_rng(seed)
    t = 1_000_000_000
    spans = []
    pipe_start = t
    for i in range(steps):
        d = int(step_ms * 1e6 * (1 + 0.01 * rng.standard_normal()))
        spans.append(Span(10 + i, 1, UNET, "function", t, t + d, 1, attrs={"diffusion.step": i}))
        t += d + 1000
    spans.insert(0, Span(1, None, PIPE, "function", pipe_start, t, 1))
    run = Run(run_id, ["python", "gen.py"], start_ns=0, end_ns=t + 1000, env=env or {"cpu_count": 2})
    return RunData(run, spans, Profile(hz=100.0))


def test_more_steps_is_not_a_slower_step_but_the_verdict_says_the_work_grew():
    from stepscope.analysis.diff import diff_runs

    a = _synthetic("a", 4, 10.0, 1, {"work": {"pipeline": {"args": {"num_inference_steps": 4}}}})
    b = _synthetic("b", 6, 10.0, 2, {"work": {"pipeline": {"args": {"num_inference_steps": 6}}}})
    d = diff_runs(a, b)
    assert d.unit == "step" and not d.headline.significant and d.env[0].key == "pipeline.num_inference_steps"
    assert d.verdict.startswith("no significant difference: a denoising step")
    assert "the environment changed (steps: 4 -> 6) without a measurable effect" in d.verdict
    assert d.verdict.endswith("4 -> 6 steps: the work took 1.50x as long (0.04 s -> 0.06 s)"), d.verdict
    assert d.flame is None and any("no samples" in n for n in d.notes)
    slow = _synthetic("c", 4, 25.0, 3, {"work": {"pipeline": {"args": {"num_inference_steps": 4}}}})
    d = diff_runs(a, slow)
    assert d.headline.significant and d.headline.change > 1.3 and d.cause is None
    assert 2.3 < d.headline.ratio < 2.7 and d.verdict.startswith(f"a denoising step is {d.headline.ratio:.2f}x slower (CI ")
    assert d.verdict.endswith("no environment change explains it")


def test_cpu_contention_is_taken_out_before_deciding():
    from stepscope.analysis.diff import diff_runs
    from stepscope.analysis.envfacts import cpu_wait_share
    from stepscope.analysis.timestats import contention

    quiet = _synthetic("a", 8, 10.0, 1, {"cpu_count": 2, "sched": [2_000_000_000, 100_000_000],
                                         "work": {"sched_first_call": [1_000_000_000, 50_000_000]}})
    busy = _synthetic("b", 8, 20.0, 2, {"cpu_count": 2, "sched": [2_000_000_000, 1_150_000_000],
                                        "work": {"sched_first_call": [1_000_000_000, 150_000_000]}})
    assert cpu_wait_share(quiet) == pytest.approx(50 / 1050) and cpu_wait_share(busy) == pytest.approx(0.5)
    assert contention(quiet, busy) == pytest.approx((1 - 50 / 1050) / 0.5)
    d = diff_runs(quiet, busy)  # 2x the time, all of it waiting for a CPU: not the program's doing
    assert d.env[0].key == "cpu_wait" and (d.env[0].before, d.env[0].after) == ("5%", "50%")
    assert not d.headline.significant and abs(d.headline.adjusted) < 0.1
    assert d.verdict.startswith("no significant difference: a denoising step +") and "once that is taken out" in d.verdict
    slower = _synthetic("c", 8, 40.0, 3, {"cpu_count": 2, "sched": [2_000_000_000, 1_150_000_000],
                                          "work": {"sched_first_call": [1_000_000_000, 150_000_000]}})
    d = diff_runs(quiet, slower)  # 4x the time, 2x of it explained by waiting
    k = (1 - 50 / 1050) / 0.5
    assert d.headline.significant and d.headline.adjusted == pytest.approx((1 + d.headline.change) / k - 1)
    assert d.headline.adjusted == pytest.approx(4 / k - 1, rel=0.05)
    r = 1 + d.headline.adjusted
    assert d.verdict.startswith(f"a denoising step is {r:.2f}x slower (CI ") and d.headline.verdict == "slower"
    assert f"x) once CPU contention 5% -> 50% is taken out (measured: {1 + d.headline.change:.2f}x slower)" in d.verdict
    assert contention(quiet, _synthetic("d", 8, 10.0, 4)) is None  # not recorded (not Linux, ingested)


def test_other_programs_busy_during_the_work_are_named():
    """Another program busy on another core makes no thread wait for a CPU, yet it can slow the steps: the CPUs it
    kept busy (the machine's busy time less the process's own, per wall time) are an environment change, and the
    verdict of a slow-down that nothing else explains says so."""
    from stepscope.analysis.diff import diff_runs
    from stepscope.analysis.envfacts import machine_others

    def env(others_ns, steal_ns=0):  # 1 s of wall time, the process itself busy 0.9 s of it
        return {"cpu_count": 2, "sched": [2_000_000_000, 10_000_000, 2_000_000_000,
                                          3_000_000_000 + 900_000_000 + others_ns, 5_000_000 + steal_ns, 1_900_000_000],
                "work": {"sched_first_call": [1_100_000_000, 10_000_000, 1_000_000_000, 3_000_000_000, 5_000_000,
                                              1_000_000_000]}}

    quiet, busy = _synthetic("a", 8, 10.0, 1, env(20_000_000)), _synthetic("b", 8, 14.0, 2, env(1_000_000_000))
    assert machine_others(quiet) == pytest.approx((0.02, 0.0)) and machine_others(busy) == pytest.approx((1.0, 0.0))
    d = diff_runs(quiet, busy)
    assert [(c.key, c.before, c.after) for c in d.env] == [("others_cpu", "0.0", "1.0")]
    assert d.headline.significant and d.cause is None  # (rank 9: named, never blamed)
    assert d.verdict.endswith("no environment change explains it, but other programs kept 0.0 -> 1.0 CPUs busy "
                              "during the work"), d.verdict
    d = diff_runs(quiet, _synthetic("c", 8, 14.0, 3, env(20_000_000, steal_ns=700_000_000)))
    assert [(c.key, c.before, c.after) for c in d.env] == [("steal", "0.0", "0.7")]
    assert "but the hypervisor kept 0.0 -> 0.7 CPUs busy" in d.verdict
    assert not diff_runs(quiet, _synthetic("e", 8, 10.0, 4, env(400_000_000))).env  # (under half a CPU: no change)
    old = _synthetic("f", 8, 10.0, 5, {"cpu_count": 2, "sched": [2, 1, 2], "work": {"sched_first_call": [1, 0, 1]}})
    assert machine_others(old) is None and not diff_runs(old, busy).env  # (recorded before these counters)


@pytest.mark.alone
def test_the_machine_counters_see_a_busy_child_and_not_the_process_itself():
    from types import SimpleNamespace

    from stepscope.analysis.envfacts import machine_others
    from stepscope.record.steps import workfacts

    if workfacts.read_machine() is None:
        pytest.skip("no /proc/stat")

    def others(work):
        start = workfacts.read_schedstat()
        work()
        d = SimpleNamespace(run=SimpleNamespace(env={"sched": workfacts.read_schedstat(),
                                                     "work": {"sched_first_call": start}}))
        return machine_others(d)[0]

    def spin(s=0.5):
        t = time.perf_counter() + s
        while time.perf_counter() < t:
            pass

    child = "import time\nt = time.perf_counter() + 0.5\nwhile time.perf_counter() < t: pass"
    # the process's own CPU time is not another program's; a child busy as long is (beside a busy process, or the
    # other worker's test, both read the same extra: hence the difference)
    own = others(spin)
    assert others(lambda: subprocess.run([sys.executable, "-c", child], check=True)) - own > 0.6, own
