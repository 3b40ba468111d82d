"""A stored run with every device file a run can have, written after the fact (no GPU, no torch_xla): a
Kineto trace in a GPU's shape (clock markers, host ops, kernels on one stream, a host sync), the matmul peak
probe, a compile report and an XLA capture with its metrics. For the device view's tests and screenshots."""

import gzip
import json
import sys
from pathlib import Path

from conftest import PROGRAMS, run_cli
from test_device_xla import meta, step, write_capture, x

from stepscope.record.device.capture import MARKER
from stepscope.store.db import COMPILE_REPORT, DEVICE_PROBE, DEVICE_TRACE, XLA_METRICS, XLA_TRACE_DIR, Store
from stepscope.store.reader import load_run

PROBE = {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "dtype": "float32", "peak_flops": 5.1e13,
         "peaks": {"float32": 5.1e13, "float16": 7.4e14, "bfloat16": 7.5e14}, "threads": 16}
COMPILE = {"graph_breaks": [{"file": "/x/pkg/unet.py", "line": 120, "reason": "Tensor.item() call", "count": 3},
                            {"file": "/x/pkg/attn.py", "line": 44, "reason": "data-dependent branch", "count": 1}],
           "recompiles": [{"file": "/x/pkg/pipe.py", "line": 88, "function": "denoise",
                           "reason": "tensor 'latents' size mismatch at index 2", "count": 2}]}


def kineto_events(start_ns: int, wall_us: float, native: int) -> list[dict]:
    """A GPU-shaped Kineto trace over the run's wall time: markers at its start and end (run clock
    ``start_ns``), then per millisecond a host matmul launching a kernel on stream 7; one ``.item()`` sync."""
    base = 1_700_000_000_000_000  # Kineto's epoch-us clock

    def ev(cat, name, ts_us, dur_us, tid=native, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": base + ts_us, "dur": dur_us, "args": args}

    out = [ev("user_annotation", f"{MARKER} start {start_ns}", 0, 1),
           ev("user_annotation", f"{MARKER} stop {start_ns + int(wall_us * 1000)}", wall_us, 1)]
    n = max(int(wall_us // 1000) - 1, 3)
    for k in range(n):
        t = k * wall_us / (n + 1)
        out += [ev("cpu_op", "aten::mm", t, 60, **{"Input Dims": [[256, 256], [256, 256]], "External id": k}),
                ev("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=1000 + k),
                ev("kernel", "sm90_xmma_gemm_f32f32", t + 20, wall_us / (n + 1) * 0.6, tid=7, correlation=1000 + k,
                   stream=7, device=0)]
    t = wall_us / 2 + 100
    out += [ev("cpu_op", "aten::item", t, 300), ev("cuda_runtime", "cudaMemcpyAsync", t + 5, 290, correlation=9),
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", t + 280, 2, tid=7, correlation=9, stream=7, device=0,
               bytes=4),
            ev("cuda_runtime", "cudaStreamSynchronize", t + 290, 5, correlation=10)]
    return out


def device_run(store: Path) -> str:
    """Record a small run into ``store`` and give it every device file; returns its id."""
    r = run_cli(["run", "-q", "--trace", "sstargets.funcs.add", "--", sys.executable, str(PROGRAMS / "behaviour.py"),
                 "thread"], store)
    assert r.returncode == 0, r.stderr
    st = Store(store)
    data = load_run(st)
    rid = data.run.id
    native = next(iter(data.profile.native_ids.values()))
    wall_us = (data.run.end_ns - data.run.start_ns) / 1e3
    doc = {"traceEvents": kineto_events(data.run.start_ns, wall_us, native),
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    st.run_file(rid, DEVICE_TRACE, create=True).write_bytes(gzip.compress(json.dumps(doc).encode()))
    st.run_file(rid, DEVICE_PROBE).write_text(json.dumps(PROBE))
    st.run_file(rid, COMPILE_REPORT).write_text(json.dumps(COMPILE))
    mono0 = data.run.start_ns
    ms = 1_000_000
    events = meta() + step(0, "aaa") + step(1000) + step(2000, "bbb") + [
        x(f"{MARKER} start@{native} {mono0}", 0, 0), x(f"{MARKER} stop@{native} {mono0 + 10 * ms}", 10_000, 0)]
    write_capture(st.run_file(rid, XLA_TRACE_DIR), {"traceEvents": events})
    snaps = [{"t_ns": mono0 - ms, "label": "start", "counters": {"UncachedCompile": 0}, "metrics": {}},
             {"t_ns": mono0 + 5 * ms, "label": "sync", "counters": {"UncachedCompile": 2},
              "metrics": {"CompileTime": [2, 240_000.0]}}]
    st.run_file(rid, XLA_METRICS).write_text(json.dumps({"snapshots": snaps, "unmirrored": {}, "error": None}))
    return rid
