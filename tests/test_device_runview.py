"""A run joined with a GPU-shaped device trace (synthetic events in Kineto's shape): rebasing, device
time per span, kernels per span, syncs attributed to the span and the Python line."""

from stepscope.record.device.capture import MARKER
from stepscope.device.kineto import from_events
from stepscope.device.runview import run_device
from stepscope.core.model import Profile, Run, RunData, Span

OFFSET_US = 1_700_000_000_000_000  # Kineto's epoch-us clock vs the run's perf_counter


def ev(cat, name, ts_us, dur_us, tid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": OFFSET_US + ts_us, "dur": dur_us, "args": args}


def test_gpu_trace_joined_with_spans():
    events = [
        ev("user_annotation", f"{MARKER} start 0", 0, 1),
        ev("user_annotation", f"{MARKER} stop 10000000000", 10_000_000, 1),
        ev("cpu_op", "aten::mm", 1_000, 50, **{"Input Dims": [[64, 32], [32, 16]], "External id": 1}),
        ev("cuda_runtime", "cudaLaunchKernel", 1_010, 5, correlation=7),
        ev("kernel", "gemm_kernel", 1_020, 400, tid=7, correlation=7, stream=7, device=0),
        ev("cpu_op", "aten::item", 1_500, 420),
        ev("cuda_runtime", "cudaMemcpyAsync", 1_505, 410, correlation=8),
        ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 1_900, 2, tid=7, correlation=8, stream=7, device=0, bytes=4),
        ev("cuda_runtime", "cudaStreamSynchronize", 1_910, 5, correlation=9),
    ]
    trace = from_events(events)
    ms = 1_000_000  # ns per ms
    spans = [Span(1, None, "pkg.Model.forward", "function", 900_000, 2_000_000, 55),
             Span(2, 1, "torch.Tensor.item", "sync", 1_490_000, 1_930_000, 55,
                  attrs={"sync": ".item()", "code.filepath": "/x/sched.py", "code.lineno": 42, "code.function": "step"})]
    prof = Profile(native_ids={55: 100})
    data = RunData(Run(id="r", command=["x"], start_ns=0, end_ns=10 * ms), spans, prof)
    view = run_device(data, trace)
    fwd = {s.name: s for s in view.spans}["pkg.Model.forward"]
    assert fwd.recorded == 1 and abs(fwd.device_ns - 402_000) < 1000  # the kernel and the copy it launched
    assert fwd.top_kernels[0][0] == "gemm_kernel" and abs(fwd.top_kernels[0][1] - 400_000) < 1000
    assert fwd.flops == 2 * 64 * 32 * 16
    kinds = {s.kind: s for s in view.summary.syncs}
    assert set(kinds) == {".item()", "device-to-host copy", "stream sync"}
    for s in kinds.values():
        assert s.annotation == "pkg.Model.forward" and s.python == "sched.py:42: step"
    (stream,) = view.summary.streams
    # epoch-us floats near 1.7e15 carry 0.25 us of precision: compare to within 1 us
    assert abs(stream.idle_ns - (1_900_000 - 1_420_000)) < 1000 and stream.host_wait_ns == stream.idle_ns
    assert view.sync_sites[0].where == "sched.py:42" and view.sync_sites[0].inside == ["pkg.Model.forward"]
