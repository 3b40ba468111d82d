"""Every numeric option is checked before anything starts: one line naming the option and its range
(exit 2 at the CLI, ValueError from stepscope.init()), NaN, infinities and negatives included; the
program is not run with an option the recorder cannot use."""

import sys

import pytest
from conftest import run_cli

import stepscope

HZ = "must be 0 (off) or between 0.01 and 10000, got "
PY = sys.executable

CASES = [
    (["run", "--hz", "1e-12"], "--hz: " + HZ + "1e-12"),
    (["run", "--hz", "nan"], "--hz: " + HZ + "nan"),
    (["run", "--hz", "inf"], "--hz: " + HZ + "inf"),
    (["run", "--hz", "-5"], "--hz: " + HZ + "-5"),
    (["run", "--hz", "0.005"], "--hz: " + HZ + "0.005"),
    (["run", "--auto-trace", "-1"], "--auto-trace: must be an integer between 0 and 50, got -1"),
    (["run", "--device-steps", "0"], "--device-steps: must be an integer between 1 and 1000000, got 0"),
    (["demo", "--steps", "0"], "--steps: must be an integer between 1 and 10000, got 0"),
    (["demo", "--size", "60"], "--size: must be a multiple of 8 between 8 and 8192, got 60"),
    (["demo", "--size", "-8"], "--size: must be a multiple of 8 between 8 and 8192, got -8"),
    (["demo", "--hz", "nan"], "--hz: " + HZ + "nan"),
    (["capture", "--pid", "1", "--hz", "1e-12", "--duration", "1s"], "--hz: " + HZ + "1e-12"),
    (["capture", "--pid", "0", "--duration", "1s"], "--pid: must be an integer between 1 and 4194304, got 0"),
    (["capture", "--pid", "1", "--duration", "nan"], "--duration: must be between 1ms and 24h, got 'nan'"),
    (["capture", "--pid", "1", "--duration", "inf"], "--duration: must be between 1ms and 24h, got 'inf'"),
    (["capture", "--pid", "1", "--steps", "-3", "--span", "x"], "--steps: must be an integer between 1 and 1000000, got -3"),
    (["serve", "--port", "0"], "--port: must be an integer between 1 and 65535, got 0"),
    (["serve", "--max-body-mb", "inf"], "--max-body-mb: must be between 0.001 and 4096, got inf"),
    (["serve", "--max-decoded-mb", "nan"], "--max-decoded-mb: must be between 0.001 and 16384, got nan"),
    (["runs", "--limit", "-1"], "--limit: must be an integer between 0 and 1000000, got -1"),
    (["suggest", "--top", "0"], "--top: must be an integer between 1 and 1000, got 0"),
    (["device", "--top", "-2"], "--top: must be an integer between 1 and 1000, got -2"),
    (["bench", "sd", "--steps", "0"], "steps: must be an integer between 1 and 10000, got 0"),
    (["bench", "sd", "--batch", "-1"], "batch: must be an integer between 1 and 1024, got -1"),
    (["bench", "sd", "--size", "65"], "size: must be a multiple of 8 between 8 and 8192, got 65"),
    (["bench", "--repeats", "0", "--", PY, "x.py", "{args}"], "repeats: must be an integer between 1 and 100000, got 0"),
    (["bench", "--warmup", "-1", "--", PY, "x.py", "{args}"], "warmup: must be an integer between 0 and 100000, got -1"),
]


@pytest.mark.parametrize("args, message", CASES, ids=[" ".join(a[:3]) for a, _ in CASES])
def test_out_of_range_options_are_one_line_and_exit_2(tmp_path, args, message):
    marker = tmp_path / "ran"
    prog = tmp_path / "p.py"
    prog.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    if args[0] == "run":
        args = args + ["--", PY, str(prog)]
    r = run_cli(args, tmp_path / "store", timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == f"stepscope: error: {message}", r.stderr
    assert not marker.exists()  # (before: --hz 1e-12 ran it, and the recorder thread died of OverflowError)
    assert not (tmp_path / "store").exists()  # refused before the store was touched


def test_trace_file_rate_is_checked(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text("profiles_hz = nan\n")
    r = run_cli(["run", "--trace-file", str(f), "--", PY, "-c", "pass"], tmp_path / "store")
    assert r.returncode == 2 and r.stderr.strip() == f"stepscope: error: {f}: profiles_hz: {HZ}nan"


def test_edges_of_the_ranges_are_accepted(tmp_path):
    r = run_cli(["run", "-q", "--hz", "0", "--", PY, "-c", "pass"], tmp_path / "store")
    assert r.returncode == 0, r.stderr
    r = run_cli(["run", "-q", "--hz", "10000", "--", PY, "-c", "pass"], tmp_path / "store")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("kwargs, message", [
    ({"profiles_hz": 1e-12}, "profiles_hz: " + HZ + "1e-12"),
    ({"profiles_hz": float("nan")}, "profiles_hz: " + HZ + "nan"),
    ({"profiles_hz": -1}, "profiles_hz: " + HZ + "-1"),
    ({"profiles_hz": "fast"}, "profiles_hz: " + HZ + "'fast'"),
    ({"max_stack_depth": 0}, "max_stack_depth: must be an integer between 1 and 10000 frames, got 0"),
    ({"flush_interval_s": float("inf")}, "flush_interval_s: must be between 0.01 and 3600 s, got inf"),
    ({"flush_interval_s": 0}, "flush_interval_s: must be between 0.01 and 3600 s, got 0"),
])
def test_init_raises_value_error_naming_the_setting(tmp_path, kwargs, message):
    with pytest.raises(ValueError) as e:
        stepscope.init(store=str(tmp_path / "store"), **kwargs)
    assert str(e.value) == message
    assert stepscope.record.api.current_session() is None and not (tmp_path / "store").exists()


def test_capture_of_a_process_without_server_needs_a_rate(tmp_path):
    import os

    r = run_cli(["capture", "--pid", str(os.getpid()), "--hz", "0", "--duration", "1s"], tmp_path / "store")
    assert r.returncode == 2 and r.stderr.strip().startswith("stepscope: error: --hz: must be between 1 and 10000 for py-spy")
    assert r.stderr.strip().endswith("got 0") and len(r.stderr.strip().splitlines()) == 1
