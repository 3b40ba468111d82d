"""Sampling truth (issue 13): on programs with a known time split, stepscope's shares are within 5 points of
the truth the program measures itself, at 101 and 1000 Hz: pure Python, Python bursts between sleeps (the
case a GIL-bound sampler thread reads as 0 %), a Python burst before a GIL-releasing C call, torch ops. The
CPU-time view leaves sleeps out. The programs are the fidelity benchmark's (benchmarks/sampling_fidelity.py),
run long enough for a few hundred samples each."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from stepscope.analysis.calltree import ProfileIndex
from stepscope.record.sampling.sampler import walk_choice
from stepscope.store import Store
from stepscope.store.reader import load_run

BENCH = Path(__file__).parent.parent / "benchmarks" / "sampling_fidelity.py"
_spec = importlib.util.spec_from_file_location("sampling_fidelity", BENCH)
fidelity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fidelity)

#: a few hundred samples give a binomial sigma of ~3 points at a 70% share: 12 s at 101 Hz (~1200 samples,
#: sigma ~1.3 points) and 3 s at 1000 Hz keep a 5-point miss at 4 sigma
SECONDS = {101: 12.0, 1000: 3.0}


@pytest.fixture(scope="module")
def per_ms(tmp_path_factory):
    return fidelity.calibrate_per_ms(tmp_path_factory.mktemp("cal"))


def _shares(index: ProfileIndex, mode: str, names) -> dict:
    _, total = index.function_times(index.select(), mode)
    got = {f.name.rsplit(".", 1)[-1]: float(total[i]) for i, f in enumerate(index.functions)
           if f.name.startswith("__main__.")}
    return fidelity._shares(got, names)


@pytest.mark.parametrize("hz", [101, 1000])
@pytest.mark.parametrize("program", ["burst_sleep_2.5", "burst_then_c", "python_70_20_10", "torch_70_20_10"])
def test_shares_within_5_points_of_the_truth(program, hz, per_ms, tmp_path, store):
    if program.startswith("torch"):
        pytest.importorskip("torch")
    _within_5_points(program, hz, per_ms, tmp_path, store, "c" if walk_choice()[0] == "c" else "python")


@pytest.mark.parametrize("program", ["burst_sleep_2.5", "python_70_20_10"])
def test_the_python_handler_within_5_points_of_the_truth(program, per_ms, tmp_path, store, monkeypatch):
    """``STEPSCOPE_SAMPLER=python``: the Python walk, and the main thread's Python signal handler (the fallback of the C
    one, ``record/native/sigtick.c``), keep the same rules."""
    monkeypatch.setenv("STEPSCOPE_SAMPLER", "python")
    _within_5_points(program, 1000, per_ms, tmp_path, store, "python")


def _within_5_points(program, hz, per_ms, tmp_path, store, handler):
    source, _ = fidelity.PROGRAMS[program]
    prog = tmp_path / f"{program}.py"
    prog.write_text(source)
    rounds = fidelity.rounds_for(prog, per_ms, SECONDS[hz], tmp_path)
    r = run_cli(["run", "-q", "--hz", str(hz), "--", sys.executable, str(prog), str(rounds), str(per_ms)], store)
    assert r.returncode == 0, r.stderr
    truth = fidelity._truth(r.stdout)
    data = load_run(Store(store))
    assert data.run.env["sampler"]["main"] == "signal", data.run.env["sampler"]
    assert data.run.env["sampler"]["handler"] == handler, data.run.env["sampler"]
    index = ProfileIndex(data.profile)
    got = _shares(index, "wall", sorted(truth))
    errors = {n: round(100 * (got[n] - truth[n]), 1) for n in truth}
    assert all(abs(e) <= 5 for e in errors.values()), (errors, got, truth)
    # every sample carries its time; the stored wall time adds up to the run's (no time lost or doubled)
    assert index.has_cpu
    sampled = index.weight.sum() / 1e9
    work = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("WORK ")][-1][5:])[0]
    assert work * 0.9 <= sampled <= data.run.wall_time_ns / 1e9 * 1.05, (sampled, work)
    if program.startswith("burst_sleep"):  # CPU time: the sleeping half is (almost) gone
        cpu = _shares(index, "cpu", sorted(truth))
        # the sleep keeps some CPU samples (up to 14.4 % at 1000 Hz, over 10 % in 5 of 9 runs, and 16.3 % once at
        # 101 Hz, on a 2-core VM): the kernel notices a CPU-timer expiration late, often when the wall timer's signal
        # wakes the sleeping thread, and the signal is handled there (docs/sampling.md: the CPU view at high rates);
        # at 1000 Hz 24 % and 28 % were seen too (2 of 17 runs on a quiet 2-core VM; main before issue 38 alike), and
        # 34.6 % once with the Python handler inside a whole `make test` (two workers); its wall share is ~75 %
        limit = 0.2 if hz < 1000 else 0.4
        assert cpu["B"] < limit and cpu["A"] > 1 - limit, cpu


def test_thread_sampler_on_request(tmp_path, store, per_ms):
    """``--sampler thread``: the old sampler thread for every thread, said in the run."""
    source, _ = fidelity.PROGRAMS["python_70_20_10"]
    prog = tmp_path / "p.py"
    prog.write_text(source)
    r = run_cli(["run", "-q", "--sampler", "thread", "--", sys.executable, str(prog), "50", str(per_ms)], store)
    assert r.returncode == 0, r.stderr
    data = load_run(Store(store))
    info = data.run.env["sampler"]
    assert {k: info[k] for k in ("main", "note")} == {"main": "thread", "note": "--sampler thread"}
    assert info["walk"] == walk_choice()[0], info  # (other threads: the C walk where the extension is built)
    # the main thread's work is sampled (how many samples depends on how long the calibrated work took on a busy
    # machine: 4 once, in a 0.13 s run, where 10 were asked for)
    p = data.profile
    main = next(t for t, n in p.thread_names.items() if n == "MainThread")
    spun = [i for i in range(len(p)) if p.sample_thread[i] == main
            and any(p.frames[f].function == "spin" for f in p.stacks[p.sample_stack[i]])]
    assert len(spun) >= 2, len(p)
    bad = run_cli(["run", "--sampler", "nope", "--", sys.executable, str(prog)], store)
    assert bad.returncode == 2 and "--sampler" in bad.stderr and "Traceback" not in bad.stderr
