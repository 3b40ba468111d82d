"""ci.budgets and ci.gate on synthetic runs: budgets parsed (and malformed ones refused with one line naming them),
statistics by numpy's linear percentile, budgets checked against a run's spans, steps, whole call and memory; the
slow-down rule shared by `diff --fail-if` and the pytest plugin."""

import numpy as np
import pytest

from stepscope.ci.budgets import BudgetError, check, durations, parse_budgets, parse_memory, parse_time, peak_memory, statistic, top_rows
from stepscope.ci.gate import is_noisy, is_slower, judge, parse_fail_if
from stepscope.core.model import MemoryTrack, Profile, Run, RunData, Span

UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
MS = 1_000_000


def run_of(unet_ms, steps: bool = False, memory=None, attrs=None, rid="r1") -> RunData:
    """A run with one root transaction around calls of UNET lasting ``unet_ms`` (each a step with ``steps``) and a
    call of ``pkg.mod.Other.forward``; ``memory``: RSS samples (bytes)."""
    t = 1_000_000
    spans = []
    for i, ms in enumerate(unet_ms):
        a = {"diffusion.step": i} if steps else {}
        spans.append(Span(10 + i, 1, UNET, "function", t, t + int(ms * MS), 1, attrs=a))
        t += int(ms * MS)
    spans.append(Span(100, 1, "pkg.mod.Other.forward", "function", t, t + 2 * MS, 1, attrs=attrs or {}))
    t += 2 * MS
    spans.insert(0, Span(1, None, "tests/test_x.py::test_y", "transaction", 0, t + MS, 1))
    mem = MemoryTrack()
    for k, b in enumerate(memory or []):
        mem.t_ns.append(k * MS)
        mem.rss.append(b)
        mem.cuda_allocated.append(None)
        mem.cuda_reserved.append(None)
    return RunData(Run(rid, ["pytest", "tests/test_x.py::test_y"], start_ns=0, end_ns=t + 2 * MS), spans,
                   Profile(hz=100.0), mem)


def test_time_budgets_parse_with_units_and_clauses():
    b = parse_time("unet", "p50 < 40ms, p95 <= 1.5 s and max < 2e3us")
    assert [(x.stat, x.op, x.limit, x.text) for x in b.limits] == [
        ("p50", "<", 40e6, "40 ms"), ("p95", "<=", 1.5e9, "1.5 s"), ("max", "<", 2e6, "2000 us")]
    assert parse_time("step", "total<10ns").limits[0].limit == 10
    assert [x.limit for x in parse_memory("peak < 2GiB").limits] == [2 * 1024 ** 3]
    assert [x.limit for x in parse_memory("peak <= 500 MB").limits] == [500e6]
    assert [x.limit for x in parse_memory("peak < 1 kib").limits] == [1024]
    assert [b.name for b in parse_budgets({"unet": "p50 < 1s", "step": "p90 < 1s"}, "peak < 1GB")] == \
        ["unet", "step", "memory"]


@pytest.mark.parametrize("name,text,words", [
    ("unet", "p50 < 40", "a duration needs a unit"),
    ("unet", "p50 < 40 parsecs", "'parsecs' is not a unit of time"),
    ("unet", "p42 < 40ms", "'p42' is not one of p50, p90, p95, p99, mean, min, max, total"),
    ("unet", "p50 > 40ms", "cannot read 'p50 > 40ms'"),
    ("unet", "fast", "cannot read 'fast'"),
    ("unet", 40, "must be a string, e.g. 'p50 < 40ms', got 40"),
])
def test_a_malformed_time_budget_is_one_line_naming_it(name, text, words):
    with pytest.raises(BudgetError) as e:
        parse_time(name, text)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"budget[{name!r}]: ") and words in msg and "e.g." in msg


def test_a_malformed_memory_budget_is_one_line_naming_it():
    for text, words in (("peak < 2", "a size needs a unit"), ("peak < 2 GiBs", "'GiBs' is not a unit of memory"),
                        ("p50 < 2GiB", "cannot read 'p50 < 2GiB'")):
        with pytest.raises(BudgetError) as e:
            parse_memory(text)
        assert "\n" not in str(e.value) and str(e.value).startswith("memory: ") and words in str(e.value)
    with pytest.raises(BudgetError, match=r"^budget: must be a dict"):
        parse_budgets(["p50 < 1s"])


def test_statistics_use_numpy_linear_percentiles():
    x = [10, 20, 30, 40]
    assert statistic("p50", x) == 25 and statistic("p90", x) == pytest.approx(37)
    assert statistic("p99", x) == pytest.approx(np.percentile(x, 99))
    assert (statistic("mean", x), statistic("min", x), statistic("max", x), statistic("total", x)) == (25, 10, 40, 100)


def test_names_resolve_as_diff_span_does():
    d = run_of([10, 20, 30])
    assert durations(d, "UNet2DConditionModel.forward")[0] == UNET
    assert durations(d, UNET)[1].tolist() == [10 * MS, 20 * MS, 30 * MS]
    assert durations(d, "test")[1].tolist() == [64 * MS] == durations(d, "run")[1].tolist()
    with pytest.raises(LookupError, match=r"^'forward' names several spans in run r1: diffusers\..*UNet2DConditionModel.forward, pkg.mod.Other.forward$"):
        durations(d, "forward")
    with pytest.raises(LookupError) as e:
        durations(d, "VAE.decode")
    assert str(e.value) == ("no span named 'VAE.decode' ran in run r1; spans that ran: "
                            f"{UNET}, pkg.mod.Other.forward")
    with pytest.raises(LookupError, match="no denoising step ran in run r1"):
        durations(d, "step")


def test_a_missed_budget_is_one_line_with_the_figure_the_budget_and_the_run():
    d = run_of([50, 52.3, 60, 40, 45], steps=True, memory=[100 << 20, 300 << 20, 200 << 20])
    ok = parse_budgets({"UNet2DConditionModel.forward": "p50 < 60ms", "step": "max < 1s", "test": "total < 1s"},
                       "peak < 1GiB")
    assert check(ok, d) == []
    missed = check(parse_budgets({"UNet2DConditionModel.forward": "p50 < 40ms, max < 1s"}), d)
    assert missed == [f"stepscope budget missed: {UNET} p50 = 50.0 ms (budget < 40 ms, 5 calls) in run r1"]
    assert check(parse_budgets({"step": "p95 <= 10ms"}), d) == [
        "stepscope budget missed: step p95 = 58.5 ms (budget <= 10 ms, 5 steps) in run r1"]
    assert check(parse_budgets(None, "peak < 256MiB"), d) == [
        "stepscope budget missed: memory peak = 300.0 MiB RSS (budget < 256 MiB) in run r1"]
    assert check(parse_budgets({"VAE.decode": "p50 < 1s"}), d)[0].startswith(
        "stepscope budget: no span named 'VAE.decode' ran in run r1; spans that ran: ")


def test_the_memory_peak_takes_exact_span_readings_and_cuda_first():
    d = run_of([10], memory=[100 << 20], attrs={"memory.rss_in": 90 << 20, "memory.rss_peak": 400 << 20})
    assert peak_memory(d) == (400 << 20, "rss")
    d.memory.cuda_allocated = [5 << 20]
    assert peak_memory(d) == (5 << 20, "cuda")
    assert check(parse_budgets(None, "peak < 1MiB"), d) == [
        "stepscope budget missed: memory peak = 5.0 MiB CUDA allocated (budget < 1 MiB) in run r1"]
    none = run_of([10])
    assert peak_memory(none) == (None, "rss")
    assert check(parse_budgets(None, "peak < 1MiB"), none) == [
        "stepscope budget: no memory figure in run r1 (recorded with --no-memory?)"]


def test_summary_rows_put_the_steps_and_the_slowest_spans_first():
    rows = top_rows(run_of([10, 20, 30], steps=True))
    assert [r.name for r in rows] == ["step", UNET, "pkg.mod.Other.forward", "test"]
    assert (rows[1].calls, rows[1].p50_ns, rows[1].total_ns) == (3, 20 * MS, 60 * MS)


def test_fail_if_parses_slower_with_an_optional_percentage():
    assert parse_fail_if("slower") is None
    assert parse_fail_if("slower:5%") == parse_fail_if("slower:5") == parse_fail_if(" slower : 5 % ") == 5.0
    assert parse_fail_if("slower:2.5%") == 2.5
    for bad in ("faster", "slower:", "slower:x%", "slower:5%%", "", "slow"):
        with pytest.raises(ValueError) as e:
            parse_fail_if(bad)
        assert str(e.value) == f"--fail-if: must be slower or slower:PCT (e.g. slower:5%), got {bad!r}"


def _tc(a, b, adjust=None):
    from stepscope.analysis.timestats import adjust as _adjust, time_change

    tc = time_change("x", a, b)
    if adjust is not None:
        _adjust(tc, adjust)
    return tc


def test_only_a_significant_slow_down_fails_and_noise_never_does():
    rng = np.random.default_rng(1)
    a = 10e6 * (1 + 0.01 * rng.standard_normal(25))
    assert is_slower(_tc(a, a * 1.3)) and is_slower(_tc(a, a * 1.3), 25) and not is_slower(_tc(a, a * 1.3), 35)
    assert not is_slower(_tc(a, a * 0.7)) and not is_slower(_tc(a, a * 1.02))  # faster; under 5%
    noisy = 10e6 * (1 + 0.3 * rng.standard_normal(25))
    tc = _tc(noisy, noisy[::-1] * 1.1)
    assert not is_slower(tc) and is_noisy(tc)
    assert judge("v", tc, "A", "B").outcome == "noisy"
    assert not is_slower(_tc(a[:2], a[:2] * 2))  # no CI: never fails
    j = judge("a verdict", _tc(a, a * 1.3), "RUN_A", "RUN_B", 5)
    assert j.outcome == "slower" and j.line == ("stepscope: slower than the baseline (threshold 5%): a verdict "
                                                "(baseline run RUN_A, this run RUN_B)")
    assert judge("same", _tc(a, a), "A", "B").outcome == "pass"
    assert judge("few", _tc(a[:2], a[:2]), "A", "B").outcome == "no CI"


def test_contention_can_explain_a_slow_down_away_but_never_make_one():
    rng = np.random.default_rng(2)
    a = 10e6 * (1 + 0.01 * rng.standard_normal(25))
    explained = _tc(a, a * 1.3, adjust=1.3)  # all of it waiting for a CPU
    assert not explained.significant and not is_slower(explained)
    made = _tc(a, a, adjust=0.8)  # the same time, less waiting in B: diff's adjusted change says +25%
    assert made.significant and made.adjusted > 0.2 and made.verdict == "slower"
    assert not is_slower(made)
    both = _tc(a, a * 1.5, adjust=1.1)
    assert is_slower(both) and not is_slower(both, 40)  # the threshold on the adjusted change (+36%)


def test_the_cpu_wait_of_a_test_is_a_share_of_its_wall_time():
    """A session's counters start with a clock reading (``workfacts.reset`` at its start; the end's carries one too):
    a sleeping thread's few ms of waiting after its wake-ups are a share of the test's wall time, not of its few ms on
    a CPU."""
    from stepscope.analysis.envfacts import cpu_wait_share
    from stepscope.record.steps import workfacts

    d = run_of([10])
    d.run.env = {"sched": [1_010_000_000, 203_000_000, 300 * MS],
                 "work": {"sched_first_call": [1_000_000_000, 200_000_000, 0]}}
    # 300 ms of wall time, 10 ms on a CPU, 3 ms waiting for one
    assert cpu_wait_share(d) == pytest.approx(0.01)
    d.run.env["work"]["sched_first_call"] = [1_000_000_000, 200_000_000]  # (no time: of the runnable time)
    assert cpu_wait_share(d) == pytest.approx(3 / 13)
    if workfacts.read_schedstat() is None:
        pytest.skip("no /proc/self/schedstat")
    workfacts.reset()
    start = workfacts.snapshot()["sched_first_call"]
    workfacts.reset()
    assert len(start) in (3, 6) and all(isinstance(x, int) for x in start)  # (6: with the machine's CPU time)
