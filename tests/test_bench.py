"""`stepscope bench`: the matrix, the statistics, and real runs (commands and the tiny SD pipeline)."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import cli_env, default_signals, run_cli, wait_until

from stepscope.bench.spec import SpecError, command_spec, from_toml, sd_spec
from stepscope.bench.stats import compare, describe

SLEEP = [sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))", "{args}"]


def test_stats_separate_real_differences_from_noise():
    rng = np.random.default_rng(1)
    a = list(1.0 + rng.normal(0, 0.01, 8))
    b = list(0.72 + rng.normal(0, 0.01, 8))
    c = list(1.0 + rng.normal(0, 0.01, 8))
    ch = compare(b, a)
    assert ch.significant and -0.30 < ch.change < -0.26 and ch.ci_low < ch.change < ch.ci_high
    assert not compare(c, a).significant
    s = describe(a)
    assert s.n == 8 and s.ci_low <= s.median <= s.ci_high and s.q25 <= s.median <= s.q75 and 0 < s.cv < 0.05


def test_matrix_and_its_errors(tmp_path):
    spec = sd_spec({"attention": ["classic", "sdpa"], "compile": ["off", "default"], "batch": ["1"]}, 1, 5,
                   "attention=classic,compile=off")
    assert len(spec.configs) == 4 and spec.baseline == 0 and spec.configs[0]["batch"] == 1
    assert spec.label(3) == "attention=sdpa compile=default"
    with pytest.raises(SpecError, match="attention: unknown 'fast'"):
        sd_spec({"attention": ["fast"]}, 1, 5, None)
    with pytest.raises(SpecError, match="unknown parameter 'colour'"):
        sd_spec({"colour": ["red"]}, 1, 5, None)
    with pytest.raises(SpecError, match="no configuration matches"):
        sd_spec({"attention": ["sdpa"]}, 1, 5, "attention=classic")
    with pytest.raises(SpecError, match="repeats"):
        command_spec(["x"], [], 1, 0, None)
    f = tmp_path / "b.toml"
    f.write_text('[bench]\nrepeats = 3\n[matrix]\nattention = ["classic", "sdpa"]\ntarget = ["unet"]\n')
    spec = from_toml(f)
    assert spec.repeats == 3 and [c["attention"] for c in spec.configs] == ["classic", "sdpa"]
    f.write_text('[matrix]\nattention = "classic"\n')
    with pytest.raises(SpecError, match=r"b.toml: \[matrix\]"):
        from_toml(f)


def test_command_benchmark_finds_the_slower_argument_set(store, tmp_path):
    tf = tmp_path / "times.txt"
    r = run_cli(["bench", "--args", "0.05", "--args", "0.20", "--repeats", "4", "--warmup", "1", "--time-file", str(tf),
                 "--json", "--", *SLEEP], store)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = doc["verdict"]["rows"]
    assert [x["stats"]["n"] for x in rows] == [4, 4]
    assert rows[1]["change"]["significant"] and rows[1]["change"]["change"] > 0.5
    assert len(doc["bench"]["runs"]) == 2 * (4 + 1)
    # interleaved: timed runs alternate between the configurations
    timed = [x["config"] for x in doc["bench"]["runs"] if not x["warmup"]]
    assert timed == [0, 1] * 4
    assert [float(x) for x in (tmp_path / "times.0.txt").read_text().split()] == pytest.approx(rows[0]["times_s"], abs=1e-6)
    bid = doc["bench"]["id"]
    csv_file, html = tmp_path / "r.csv", tmp_path / "r.html"
    r = run_cli(["bench", "show", bid[:12], "--csv", str(csv_file), "--html", str(html)], store)
    assert r.returncode == 0 and "slower" in r.stdout
    assert len(csv_file.read_text().splitlines()) == 1 + 10 and "data:image/png;base64," in html.read_text()
    r = run_cli(["bench", "plot", bid, "-o", str(tmp_path / "p.png")], store)
    assert r.returncode == 0 and (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    r = run_cli(["bench", "compare", bid, bid, "--json"], store)
    assert all(not x["significant"] for x in json.loads(r.stdout)["rows"])


def test_ctrl_c_keeps_finished_runs(store):
    from stepscope.store import Store, StoreError
    from stepscope.store import bench as bench_store

    p = subprocess.Popen([sys.executable, "-m", "stepscope", "bench", "--args", "0.2", "--repeats", "20", "--warmup", "0",
                          "--", *SLEEP], env=cli_env(store), cwd=store.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=default_signals)

    def finished() -> int:  # runs of the benchmark stored so far (each is written as it ends: what `bench show` reads)
        st = Store(store, create=False)
        try:
            return len([x for x in bench_store.load(st, bench_store.resolve(st, None))["runs"] if x["error"] is None])
        finally:
            st.close()

    try:
        wait_until(lambda: finished() >= 3, 120, lambda: f"3 finished runs of the benchmark (so far: {finished()})",
                   ignore=(StoreError,))
    except BaseException:
        p.kill()
        raise
    os.kill(p.pid, signal.SIGINT)
    p.wait(30)
    doc = json.loads(run_cli(["bench", "show", "--json"], store).stdout)
    assert doc["bench"]["status"] == "interrupted"
    assert 3 <= len([x for x in doc["bench"]["runs"] if x["error"] is None]) < 20


def test_sd_unet_benchmark_reports_unavailable_backends(store):
    pytest.importorskip("diffusers")
    r = run_cli(["bench", "sd", "--target", "unet", "--attention", "classic,sdpa,sdpa-cudnn", "--repeats", "2",
                 "--warmup", "1", "--json"], store)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["verdict"]["rows"]
    assert [x["stats"]["n"] if x["stats"] else 0 for x in rows] == [2, 2, 0]
    assert "unavailable" in rows[2]["problem"]
    assert rows[0]["peak_bytes"] > 0 and rows[0]["first_warmup_s"] > 0
    text = run_cli(["bench", "show"], store).stdout
    assert "unavailable" in text and "baseline" in text


@pytest.mark.parametrize("n", [257, 300, 1001, 2000])
def test_bootstrap_medians_of_many_values_have_the_direct_resampling_distribution(n):
    """Past ``DIRECT_MAX`` values the bootstrap medians come from order statistics (O(B), not B x n): their
    distribution is that of resampling directly, odd and even n, with ties (a two-sample KS distance within what
    two samples of 10,000 draws of one distribution give: 0.025 at the 0.1% level)."""
    import numpy as np

    from stepscope.bench import stats

    rng = np.random.default_rng(n)
    for x in (rng.lognormal(0, 0.5, n), np.round(rng.normal(10, 1, n))):  # continuous, and heavy ties
        fast = np.sort(stats._boot_medians(x, np.random.default_rng(1)))
        direct = np.sort(np.median(x[np.random.default_rng(2).integers(0, n, size=(stats.B, n))], axis=1))
        grid = np.union1d(fast, direct)
        ks = np.max(np.abs(np.searchsorted(fast, grid, "right") - np.searchsorted(direct, grid, "right"))) / stats.B
        assert ks < 0.025, (n, ks)
    a, b = rng.normal(1.0, 0.1, 1_000_000), rng.normal(1.01, 0.1, 1_000_001)  # a million repeats: no B x n array
    big = stats.compare(b.tolist(), a.tolist())
    assert big.significant and big.ci_low < big.change < big.ci_high and 0.007 < big.change < 0.013, big


def test_paired_change_with_groups_resamples_whole_groups():
    """Pairs from one process share its slow spells: resampled one by one, identical sides (an A/A run) read a CI that
    excludes 0; ``groups`` resamples whole processes (the cluster bootstrap), whose CI is as wide as the spread between
    processes and covers the truth."""
    from stepscope.bench.stats import paired_change

    rng = np.random.default_rng(3)
    covered_pairs = covered_groups = 0
    for trial in range(20):
        x, b, g = [], [], []
        for k in range(12):  # 12 processes, each with a shift of its own on one side (a spell), 16 pairs each
            shift = rng.normal(0, 0.01)
            for _ in range(16):
                base = 1 + rng.normal(0, 0.05)
                b.append(base)
                x.append(base * (1 + shift + rng.normal(0, 0.002)))
                g.append(k)
        one, whole = paired_change(x, b, seed=trial), paired_change(x, b, seed=trial, groups=g)
        assert whole.change == one.change and whole.ci_high - whole.ci_low > 2 * (one.ci_high - one.ci_low)
        covered_pairs += one.ci_low <= 0 <= one.ci_high
        covered_groups += whole.ci_low <= 0 <= whole.ci_high
    assert covered_groups >= 16 and covered_pairs <= 8, (covered_groups, covered_pairs)
    with pytest.raises(ValueError, match="groups"):
        paired_change([1.0, 2.0], [1.0, 2.0], groups=[0])
