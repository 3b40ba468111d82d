"""One assembly of a recording (``stepscope.record.parts``): `stepscope run`, the API, a capture window and a followed
child get the same parts from the same settings; where one differs, its part says so in ``wanted``."""

import json
import subprocess
import sys

import pytest
from conftest import cli_env, run_cli

from stepscope.record import parts
from stepscope.record.settings import Settings
from stepscope.record.tracing.syncs import SYNC_TARGETS
from stepscope.store import Store

WORK = """\
x = torch.ones(64, 64)
for _ in range(3):
    x = (x @ x).div(64)
print(float(x.sum().item()))
"""
API_DEVICE_PROG = ("import torch\nfrom stepscope.record.api import shutdown, start\n"
                   "from stepscope.record.settings import Settings\n\n"
                   "start(Settings(device_trace=True))\n" + WORK + "shutdown()\n")


def test_api_with_device_trace_records_the_device_trace(tmp_path, store):
    """``stepscope.api.start(Settings(device_trace=True))`` records the torch profiler's timeline, as `stepscope run
    --device-trace` does, with the sync sites traced (a device trace implies them: ``Settings``)."""
    pytest.importorskip("torch")
    prog = tmp_path / "prog.py"
    prog.write_text(API_DEVICE_PROG)
    plain = subprocess.run([sys.executable, "-c", "import torch\n" + WORK], capture_output=True, text=True, timeout=120)
    r = subprocess.run([sys.executable, str(prog)], env=cli_env(store), cwd=tmp_path, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    assert (r.stdout, r.stderr) == (plain.stdout, plain.stderr)
    st = Store(store)
    (run,) = st.list_runs()
    assert (st.path / "runs" / run.id / "device_trace.json.gz").is_file()
    assert set(SYNC_TARGETS) <= set(st.get_run(run.id).settings["functions_to_trace"])
    st.close()
    dev = json.loads(run_cli(["device", "--json"], store).stdout)["device"]
    assert dev["summary"] is not None
    assert ".item()" in {s["kind"] for s in dev["sync_sites"]}


def test_a_device_trace_implies_the_sync_targets_once():
    s = Settings(functions_to_trace=("a.b",), device_trace=True)
    assert s.functions_to_trace == ("a.b", *SYNC_TARGETS)
    assert Settings.from_dict(s.to_dict()) == s
    assert Settings(functions_to_trace=("a.b",), syncs=True).functions_to_trace == ("a.b", *SYNC_TARGETS)
    assert Settings(functions_to_trace=("a.b",)).functions_to_trace == ("a.b",)
    assert "syncs" not in s.to_dict()  # (folded into the names: the stored settings are as before)


def wanted(settings: Settings, origin: str) -> set[str]:
    return {p.name for p in parts.wanted_parts(settings, origin)}


def test_the_same_settings_give_the_same_parts_but_where_a_part_says_why_not():
    every = Settings(device_trace=True, compile_report=True, memory_history=True)
    run, api, window, fork = (wanted(every, o) for o in ("run", "api", "window", "fork"))
    assert {"device trace", "compile report", "memory history", "collectives", "dynamo hooks"} <= run
    assert run - api == {"end signals", "forks followed"}  # the program's own signals and children under the API
    assert run - window == {"end signals", "forks followed", "flight recorder"}
    assert run - fork == {"device trace", "compile report", "flight recorder"}
    assert "ddp" not in run  # the device trace has the collectives (tracing/ddp.py)
    plain = Settings()
    assert "ddp" in wanted(plain, "run") and "device trace" not in wanted(plain, "run")
    assert "forks followed" not in wanted(Settings(children=False), "run")


def test_one_rule_picks_the_xla_profiler(monkeypatch):
    monkeypatch.setenv("STEPSCOPE_DEVICE_PROFILER", "torch")
    assert parts.device_profiler({"torch_xla": object()}) == "torch"
    monkeypatch.delenv("STEPSCOPE_DEVICE_PROFILER")
    assert parts.device_profiler({"torch_xla": object(), "torch": object()}) == "xla"
    assert parts.device_profiler({"torch": object()}) == "torch"  # the program runs torch without XLA
    monkeypatch.setattr(parts, "_installed", lambda name: name == "torch_xla")
    assert parts.device_profiler({}) == "xla"  # not imported yet: installed is enough
    monkeypatch.setattr(parts, "_installed", lambda name: False)
    assert parts.device_profiler({}) == "torch"
