"""PyTorch/XLA traces without torch_xla (synthetic trace-viewer JSON shaped as the XLA profiler writes it):
a TPU capture's steps, graph executions cut by reads, recompilations, transfers, device idle gaps tied to
the host label; a run joined with its XLA trace (clock markers, sync sites, metrics per step); the CLI on
capture folders and bad input. The real thing runs in tests_xla/ (make test-xla)."""
import gzip
import json

from conftest import run_cli

from stepscope.record.device.capture import MARKER
from stepscope.device.xla import analyze
from stepscope.device.xla_load import load_xla
from stepscope.device.xla_run import run_xla
from stepscope.core.model import Profile, Run, RunData, Span

HOST, RT, OPS = 10, 11, 3


def x(name, ts_us, dur_us, pid=1, tid=HOST, **args):
    e = {"ph": "X", "pid": pid, "tid": tid, "ts": ts_us, "dur": dur_us, "name": name}
    if args:
        e["args"] = args
    return e


def meta():
    return [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
            {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:TPU:0"}},
            {"ph": "M", "pid": 1, "tid": HOST, "name": "thread_name", "args": {"name": "python"}},
            {"ph": "M", "pid": 2, "tid": OPS, "name": "thread_name", "args": {"name": "XLA Ops"}},
            {"ph": "M", "pid": 2, "tid": 4, "name": "thread_name", "args": {"name": "XLA Modules"}}]


def step(t0, compile_hash=None, label="denoise"):
    """One loop iteration at t0 (us): a label; a read (.item()) that runs the graph so far; a step marker."""
    ev = [x(label, t0, 1000)]
    if compile_hash:
        ev.append(x("SyncTensorsGraphInternal", t0 + 100, 160))
        ev.append(x("XLAGraphExecutor::Compile", t0 + 110, 120, graph_hash=compile_hash))
        ev.append(x("dce", t0 + 120, 5))  # a compiler pass: internal, not a label
    ev += [x("ScheduleSyncTensorsGraph", t0 + 250, 5),
           x("PjRtComputationClient::ExecuteComputation", t0 + 260, 30, tid=RT),
           x("PjRtComputationClient::TransferFromDevice", t0 + 300, 50),
           x("fusion.1", t0 + 265, 25, pid=2, tid=OPS), x("SyncTensorsGraph.5", t0 + 262, 30, pid=2, tid=4),
           x("StepMarker", t0 + 900, 90), x("ScheduleSyncTensorsGraph", t0 + 910, 5),
           x("PjRtComputationClient::ExecuteComputation", t0 + 920, 60, tid=RT),
           x("fusion.2", t0 + 925, 55, pid=2, tid=OPS)]
    return ev


def tpu_doc():
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True},
            "traceEvents": meta() + step(0, "aaa") + step(1000) + step(2000, "bbb") + [{}]}


def write_capture(root, doc):
    folder = root / "plugins" / "profile" / "2026_01_01_00_00_00"
    folder.mkdir(parents=True)
    (folder / "tpu-vm.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return folder


def test_tpu_capture_steps_reads_recompiles_and_gaps(tmp_path):
    folder = write_capture(tmp_path / "prof", tpu_doc())
    s = analyze(load_xla(tmp_path / "prof"))
    assert s.step_source.startswith("step markers")
    steps = {st.label: st for st in s.steps}
    assert list(steps) == ["sync 1", "sync 2", "sync 3"]
    for st in steps.values():
        f = st.figures
        assert f.executions == 2 and f.reads == 1 and f.from_device == 1 and f.from_device_ns == 50_000
    assert steps["sync 1"].figures.compiles == 1 and steps["sync 1"].recompiles == 0
    assert steps["sync 2"].figures.compiles == 0 and steps["sync 3"].recompiles == 1 and s.recompiles == 1
    assert s.graphs == 2 and s.total.compiles == 2 and s.total.compile_ns == 240_000
    # host time between executions: the step's wall time not covered by its two graphs (30 + 60 us)
    assert steps["sync 2"].figures.host_ns == steps["sync 2"].figures.wall_ns - 90_000
    (lane,) = s.lanes
    assert lane.lane == "/device:TPU:0" and lane.activities == 6 and lane.busy_ns == 3 * 80_000
    g = s.gaps[0]
    assert g.duration_ns == 635_000 and g.span == "denoise" and g.step == "sync 1"
    spans = {sp.name: sp for sp in s.spans}
    assert set(spans) == {"denoise"} and spans["denoise"].calls == 3
    assert spans["denoise"].figures.executions == 6 and spans["denoise"].figures.reads == 3
    (site,) = s.transfers
    assert site.direction == "from device" and site.count == 3 and site.inside == ["denoise"]
    assert load_xla(folder).files == load_xla(next(folder.iterdir())).files


def test_run_joined_with_its_xla_trace(tmp_path):
    """Clock markers rebase the trace; a sync site's span gives a transfer its Python line; the metrics
    readings become per-step changes."""
    ms = 1_000_000
    mono0 = 5_000 * ms  # the run clock at the trace's zero
    events = meta() + step(0, "aaa") + step(1000) + [
        x(f"{MARKER} start@777 {mono0}", 0, 0), x(f"{MARKER} stop@777 {mono0 + 10 * ms}", 10_000, 0)]
    run_dir = tmp_path / "run"
    write_capture(run_dir / "xla_trace", {"traceEvents": events})
    snaps = [{"t_ns": mono0 - ms, "label": "start", "counters": {"aten::_local_scalar_dense": 0}, "metrics": {}},
             {"t_ns": mono0 + 1, "label": "begin 0", "counters": {"aten::_local_scalar_dense": 0}, "metrics": {}},
             {"t_ns": mono0 + 995_000, "label": "sync", "counters": {"aten::_local_scalar_dense": 1, "UncachedCompile": 1},
              "metrics": {"TransferFromDeviceTime": [1, 50_000.0]}},
             {"t_ns": mono0 + 1_000_001, "label": "begin 1", "counters": {"aten::_local_scalar_dense": 1, "UncachedCompile": 1},
              "metrics": {"TransferFromDeviceTime": [1, 50_000.0]}},
             {"t_ns": mono0 + 1_995_000, "label": "sync", "counters": {"aten::_local_scalar_dense": 2, "UncachedCompile": 1},
              "metrics": {"TransferFromDeviceTime": [2, 100_000.0]}}]
    (run_dir / "xla_metrics.json").write_text(json.dumps({"snapshots": snaps, "unmirrored": {"pkg.Pipe.__call__": "not mirrored ..."},
                                                          "error": None}))
    us = 1000
    spans = [Span(1, None, "pkg.Pipe.__call__", "function", mono0, mono0 + 2000 * us, 55),
             Span(2, 1, "pkg.UNet.forward", "function", mono0 + 1, mono0 + 200 * us, 55, attrs={"diffusion.step": 0}),
             Span(3, 1, "torch.Tensor.item", "sync", mono0 + 240 * us, mono0 + 360 * us, 55,
                  attrs={"sync": ".item()", "code.filepath": "/x/sched.py", "code.lineno": 42, "code.function": "step"}),
             Span(4, 1, "pkg.UNet.forward", "function", mono0 + 1000 * us + 1, mono0 + 1200 * us, 55, attrs={"diffusion.step": 1}),
             Span(5, 1, "torch.Tensor.item", "sync", mono0 + 1240 * us, mono0 + 1360 * us, 55,
                  attrs={"sync": ".item()", "code.filepath": "/x/sched.py", "code.lineno": 42, "code.function": "step"})]
    data = RunData(Run(id="r", command=["x"], start_ns=mono0, end_ns=mono0 + 10 * ms), spans, Profile(native_ids={55: 777}))
    s = run_xla(data, run_dir / "xla_trace", run_dir / "xla_metrics.json")
    assert s.step_source.startswith("denoising steps")
    steps = {st.label: st for st in s.steps}
    assert steps["0"].figures.executions == 2 and steps["0"].figures.reads == 1 and steps["0"].figures.compiles == 1
    assert steps["1"].figures.compiles == 0
    assert steps["0"].metrics["aten::_local_scalar_dense"] == 1 and steps["0"].metrics["UncachedCompile"] == 1
    assert steps["1"].metrics == {"aten::_local_scalar_dense": 1, "TransferFromDeviceTime.count": 1,
                                  "TransferFromDeviceTime": 50_000.0}
    (site,) = s.transfers
    assert (site.kind, site.where, site.function, site.count) == (".item()", "sched.py:42", "step", 2)
    assert site.steps == ["0", "1"] and site.wait_ns == 2 * 120 * us and site.inside == ["pkg.Pipe.__call__"]
    assert s.unmirrored == {"pkg.Pipe.__call__": "not mirrored ..."}
    spans_by = {sp.name: sp for sp in s.spans}
    assert spans_by["pkg.Pipe.__call__"].figures.executions == 4


def test_device_cli_on_capture_folders_and_bad_input(tmp_path):
    store = tmp_path / "store"
    folder = write_capture(tmp_path / "prof", tpu_doc())
    r = run_cli(["device", str(folder) + "/"], store)
    assert r.returncode == 0, r.stderr
    assert "Per step (step markers" in r.stdout and "/device:TPU:0" in r.stdout and "denoise" in r.stdout
    doc = json.loads(run_cli(["device", str(tmp_path / "prof"), "--json"], store).stdout)
    assert [s["label"] for s in doc["xla"]["steps"]] == ["sync 1", "sync 2", "sync 3"]
    bad = tmp_path / "bad" / "plugins" / "profile" / "t"
    bad.mkdir(parents=True)
    (bad / "h.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"name": "StepMarker", "ph": "X", "ts": "x"}]}'))
    r = run_cli(["device", str(tmp_path / "bad")], store)
    assert r.returncode == 2 and "h.trace.json.gz: traceEvents[0]: complete event without a numeric ts/dur" in r.stderr
    (bad / "h.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"name": "StepMarker"'))
    r = run_cli(["device", str(tmp_path / "bad") + "/"], store)
    assert r.returncode == 2 and "h.trace.json.gz: not JSON" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "none").mkdir()
    r = run_cli(["device", str(tmp_path / "none") + "/"], store)
    assert r.returncode == 2 and "no <host>.trace.json.gz" in r.stderr


def test_step_marker_guard_with_a_stand_in_torch_xla(monkeypatch, tmp_path):
    """tracing.mirror against a stand-in for torch_xla's C module that raises as torch_xla does when a step
    marker meets an open IR scope: traced code that reaches the marker runs on, its span is noted and not
    mirrored again; spans that do not reach one stay mirrored; disabling puts the C function back."""
    import sys
    import types

    from stepscope.record.spans import buffer
    from stepscope.record.tracing import mirror
    from stepscope.record.tracing.patch import Patcher

    log, scopes = [], []

    class TraceMe:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            log.append(("open", self.name))

        def __exit__(self, *exc):
            log.append(("close", self.name))

    class ScopePusher:
        def __init__(self, name):
            self.name = name
            scopes.append(name)

        def __del__(self):
            scopes.pop()

    def step_marker(device="", devices=(), wait=True, reset_scope=True):
        if scopes:
            raise RuntimeError("Expecting scope to be empty but it is " + "/".join(scopes))
        log.append(("marker", None))

    C = types.ModuleType("torch_xla._XLAC")
    C.profiler = types.SimpleNamespace(TraceMe=TraceMe, scope_pusher=ScopePusher, TslProfilerSessionWrapper=object)
    C._xla_step_marker = step_marker
    fake = types.ModuleType("torch_xla")
    fake._XLAC = C
    monkeypatch.setitem(sys.modules, "torch_xla", fake)
    (tmp_path / "ss_fake_xla_prog.py").write_text(
        "import torch_xla\n"
        "def inner():\n    return 1\n"
        "def loop_step():\n    inner()\n    torch_xla._XLAC._xla_step_marker('', [])\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    prog = importlib.import_module("ss_fake_xla_prog")
    monkeypatch.setitem(sys.modules, "ss_fake_xla_prog", prog)
    buffer.take()
    p = Patcher(mirror=True)
    p.add(["ss_fake_xla_prog.inner", "ss_fake_xla_prog.loop_step"])
    assert not p.unresolved
    mirror.reset_unmirrored()
    mirror.enable_xla()
    try:
        assert prog.loop_step() == 2 and prog.loop_step() == 2  # no "Expecting scope to be empty"
        assert ("marker", None) in log and not scopes
        notes = mirror.unmirrored()
        assert list(notes) == ["ss_fake_xla_prog.loop_step"] and "ss_fake_xla_prog.py:6" in notes["ss_fake_xla_prog.loop_step"]
        assert log.count(("open", "ss_fake_xla_prog.loop_step")) == 1  # the first call's range only
        assert log.count(("open", "ss_fake_xla_prog.inner")) == 2 == log.count(("close", "ss_fake_xla_prog.inner"))
    finally:
        mirror.disable_xla()
        p.remove()
        buffer.take()
    assert C._xla_step_marker is step_marker
