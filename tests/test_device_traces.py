"""Device analyses on Kineto traces recorded on real GPUs (../shared/traces, from HTA's test data)."""

import gzip
import json
import os
from pathlib import Path

import pytest
from conftest import run_cli

from stepscope.device.analysis import host_syncs, idle_breakdown, op_stats, summarize_device
from stepscope.device.kineto import TraceError, load

TRACES = Path(os.environ.get("STEPSCOPE_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "traces"


def trace(name):
    p = TRACES / f"{name}.json.gz"
    if not p.exists():
        pytest.skip(f"{p} not found (../shared/traces beside the checkout)")
    return load(p)


def test_event_sync_trace_inventory():
    t = trace("a100_event_sync")
    assert t.device_name == "NVIDIA A100-PG509-200"
    syncs = host_syncs(t)
    assert [s.kind for s in syncs] == [".item()", "device-to-host copy", "stream sync", "event sync", "device sync"]
    item = syncs[0]
    assert item.enclosing_op == "aten::is_nonzero" and item.annotation == "ProfilerStep#100" and item.cost_ns == 45_000
    assert syncs[1].nbytes == 1


def test_event_sync_idle_gaps_are_host_wait_and_attributed():
    streams, gaps = idle_breakdown(trace("a100_event_sync"))
    (s,) = streams
    assert (s.device, s.stream, s.activities) == (0, 7, 5)
    assert s.idle_ns == s.host_wait_ns == s.span_ns - s.busy_ns
    assert gaps[0].category == "host_wait" and gaps[0].host_op == "aten::is_nonzero"
    assert "spin_kernel" in gaps[0].next_name


def test_v100_training_idle_shares_agree_with_hta():
    t = trace("v100_training_rank0")
    assert len(t) == 45420 and t.device_name == "Tesla V100-SXM2-32GB"
    (s,) = idle_breakdown(t)[0]
    # HTA 0.5.0 on the same file: host wait 1709 us (16.9%), kernel wait 8404 us (83.1%), other 0
    assert s.other_ns == 0
    assert abs(s.host_wait_ns / s.idle_ns - 0.169) < 0.01
    assert abs(s.kernel_wait_ns / s.idle_ns - 0.831) < 0.01
    assert 0.98 < s.busy_ns / s.span_ns < 0.99


def test_two_streams_and_top_ops():
    t = trace("a100_simple_add")
    streams, _ = idle_breakdown(t)
    assert sorted(s.stream for s in streams) == [7, 20]
    ops = op_stats(t, ("cpu_op",))
    assert ops and all(o.self_ns <= o.total_ns for o in ops)
    summary = summarize_device(t)
    assert summary.sync_counts == {"stream sync": 16, "device sync": 5}


def test_device_cli_json_and_errors(store, tmp_path):
    p = TRACES / "a100_alexnet.json.gz"
    if not p.exists():
        pytest.skip("shared traces missing")
    r = run_cli(["device", str(p), "--json"], store)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["device"]
    assert doc["device"] == "NVIDIA A100-PG509-200" and len(doc["streams"]) == 2
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"schemaVersion": 1}'))
    r = run_cli(["device", str(bad)], store)
    assert r.returncode == 2 and r.stderr.strip() == f"stepscope: error: {bad}: no traceEvents list (not a Chrome/Kineto trace)"
    worse = tmp_path / "worse.json"
    worse.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": "soon"}]}')
    with pytest.raises(TraceError, match=r"traceEvents\[0\]"):
        load(worse)


def test_typed_reader_gives_the_general_readers_columns():
    """``load`` decodes straight into columns (msgspec structs, no dict per event); on every shared trace its
    columns, names, metadata and FLOP counts equal those of the general reader (a dict per event), and
    ``args[i]`` keeps the ids (-1 is "absent") and the input shapes of FLOP-counted ops."""
    import gzip

    import numpy as np
    import orjson

    from stepscope.device import kineto
    from stepscope.device.flops import FLOP_OPS, trace_flops

    for path in sorted(TRACES.glob("*.json.gz")):
        fast = kineto.load(path)
        doc = orjson.loads(gzip.decompress(path.read_bytes()))
        slow = kineto.from_events(doc["traceEvents"], str(path), doc)
        for c in ("cat", "name", "ts", "dur", "pid", "tid", "correlation", "external_id", "stream", "device", "nbytes"):
            assert np.array_equal(getattr(fast, c), getattr(slow, c)), (path.name, c)
        assert fast.names == slow.names and fast.metadata == slow.metadata and fast.base_ns == slow.base_ns
        assert np.array_equal(trace_flops(fast), trace_flops(slow)), path.name
        for i in range(0, len(slow), max(1, len(slow) // 200)):
            want = {k: v for k, v in slow.args[i].items() if k in ("correlation", "External id", "stream", "device", "bytes")
                    and v != -1 or (k in ("Input Dims", "Concrete Inputs") and slow.names[slow.name[i]] in FLOP_OPS)}
            assert fast.args[i] == want, (path.name, i)


def test_bad_trace_files_are_one_line_errors(tmp_path):
    from stepscope.device.kineto import TraceError, load

    cases = {"notjson.json": b"{nope", "noevents.json": b'{"a": 1}', "badts.json": b'{"traceEvents": [{"ph": "X", "ts": "x"}]}',
             "trunc.json.gz": __import__("gzip").compress(b'{"traceEvents": []}')[:-6]}
    for name, body in cases.items():
        f = tmp_path / name
        f.write_bytes(body)
        with pytest.raises(TraceError) as e:
            load(f)
        assert str(f) in str(e.value) and "\n" not in str(e.value), (name, e.value)


def test_kernel_labels_keep_what_tells_kernels_apart():
    """Table cells show a kernel's short label (the GPU check's H100 trace printed 20-line template signatures);
    the labels of real Kineto kernel names drop return type and parameters and keep the computing functor."""
    from stepscope.device.names import kernel_label
    from stepscope.output.terminal.device import share

    cases = {
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add"
        "<c10::Half> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::Half> const&)::{lambda(int)#1}>(int, "
        "at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::Half> >(at::TensorIteratorBase&, "
        "at::native::CUDAFunctor_add<c10::Half> const&)::{lambda(int)#1})": "at::native::elementwise_kernel<…CUDAFunctor_add…>",
        "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::Half>(long, c10::Half, c10::Half const*, "
        "c10::Half*, c10::Half*)": "at::native::RowwiseMomentsCUDAKernel<c10::Half>",
        "void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::silu_kernel(at::"
        "TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#5}::operator()() const::{lambda(c10::Half)#1}, "
        "std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()"
        "#1}::operator()() const, std::array<char*, 2ul>)": "at::native::vectorized_elementwise_kernel<…silu_kernel…>",
        "Memset (Device)": "Memset (Device)",
        "Memcpy DtoH (Device -> Pageable)": "Memcpy DtoH (Device -> Pageable)",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0":
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_16x16_32x1_nn_align2>(cutlass_80_wmma_"
        "tensorop_f16_s161616gemm_f16_16x16_32x1_nn_align2::Params)":
            "cutlass::Kernel2<…cutlass_80_wmma_tensorop_f16_s161616gemm_f16_16x16_32x1_nn_align2…>",
        "": "",
    }
    for name, label in cases.items():
        assert kernel_label(name) == label, name
    # every kernel of the real traces: a label no longer than the name, never empty, never a parameter list
    names = set()
    for f in TRACES.glob("*.json.gz"):
        with gzip.open(f, "rt") as fh:
            names |= {e["name"] for e in json.load(fh).get("traceEvents", []) if e.get("cat") == "kernel"}
    assert len(names) > 50
    for n in names:
        lab = kernel_label(n)
        assert lab and len(lab) <= len(n) and len(lab) < 160 and "(int" not in lab and not lab.startswith("void "), n
    assert [share(x) for x in (None, 0, 0.5, 0.0123, 0.003, 0.0004)] == ["-", "0%", "50%", "1%", "0.3%", "<0.1%"]


def test_self_times_vectorised_equal_the_stack_walk(monkeypatch):
    """``self_times`` (depth by counting, parents by level) gives the stack walk's figures on every real trace and
    on random events that nest, overlap without nesting, tie in start or last zero time."""
    import numpy as np

    from stepscope.device import analysis
    from stepscope.device.analysis import _children_ns_stack, self_times

    fallbacks = []
    monkeypatch.setattr(analysis, "_children_ns_stack", lambda ts, dur: fallbacks.append(len(ts)) or _children_ns_stack(ts, dur))

    def walk(trace, idx):  # the reference: one stack walk per thread over every event
        out = trace.dur[idx].astype(np.int64)
        for tid in np.unique(trace.tid[idx]).tolist():
            where = np.flatnonzero(trace.tid[idx] == tid)
            sel = idx[where]
            order = np.lexsort((-trace.dur[sel], trace.ts[sel]))
            out[where[order]] -= _children_ns_stack(trace.ts[sel][order].tolist(), trace.dur[sel][order].tolist())
        return out

    for f in sorted(TRACES.glob("*.json.gz")):
        t = load(f)
        for cat in ("cpu_op", "kernel"):
            idx = np.flatnonzero(t.mask(cat))
            assert np.array_equal(self_times(t, idx), walk(t, idx)), (f.name, cat)

    class T:  # the columns self_times reads
        def __init__(self, ts, dur, tid):
            self.ts, self.dur, self.tid = (np.asarray(a, np.int64) for a in (ts, dur, tid))

    rng = np.random.default_rng(7)
    overlapped = 0
    fallbacks.clear()
    for case in range(300):
        ts, dur = [], []

        def tree(t0, t1, depth):  # nested events inside [t0, t1)
            t = t0
            while t < t1 and depth < 6 and rng.random() < 0.8:
                a = t + int(rng.integers(0, 4))
                b = min(t1, a + int(rng.integers(0, 40)))
                if a > b:
                    break
                ts.append(a)
                dur.append(b - a)
                tree(a, b, depth + 1)
                t = b
        tree(0, 400, 0)
        if case % 3 == 0 and ts:  # some overlap without nesting
            k = int(rng.integers(0, len(ts)))
            dur[k] += int(rng.integers(1, 30))
        if case % 5 == 0 and ts:  # duplicates: ties in start and length
            ts += ts[:3]
            dur += dur[:3]
        tid = rng.integers(0, 3, len(ts))
        tr = T(ts, dur, tid)
        idx = rng.permutation(len(ts)).astype(np.int64)
        n = len(fallbacks)
        assert np.array_equal(self_times(tr, idx), walk(tr, idx)), case
        overlapped += len(fallbacks) > n
    assert overlapped > 20  # the stack walk of a group that does not nest was exercised


def test_a_gap_names_the_op_that_launched_what_ended_it():
    """The H100 check's largest gaps (0.5-1 s) began in ``aten::linear`` and ended with a launch from cuDNN's
    attention (its plan being built): each gap says which op launched the next activity, and keeps the op running
    when it began; only the ``keep`` largest gaps are made."""
    from stepscope.device.kineto import from_events

    def ev(cat, name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = [ev("cpu_op", "aten::linear", 0, 50), ev("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
              ev("kernel", "void gemm<float, 128>(float*)", 20, 10, tid=7, correlation=1, stream=7, device=0),
              ev("cpu_op", "aten::scaled_dot_product_attention", 60, 1000),
              ev("cpu_op", "aten::_cudnn_attention_forward", 61, 998),
              ev("cuda_runtime", "cudaLaunchKernel", 1000, 5, correlation=2),
              ev("kernel", "Memset (Device)", 1010, 5, tid=7, correlation=2, stream=7, device=0)]
    for k in range(30):  # small gaps after it
        events += [ev("cuda_runtime", "cudaLaunchKernel", 1100 + 20 * k, 2, correlation=10 + k),
                   ev("kernel", "void add<float>(float*)", 1101 + 20 * k, 3, tid=7, correlation=10 + k, stream=7, device=0)]
    t = from_events(events)
    streams, gaps = idle_breakdown(t, keep=5)
    assert len(gaps) == 5 and streams[0].activities == 32
    g = gaps[0]
    assert g.duration_ns == 980_000 and g.host_op == "aten::linear"
    assert g.launched_in == "aten::scaled_dot_product_attention" and g.next_name == "Memset (Device)"
    assert [x.duration_ns for x in gaps] == sorted((x.duration_ns for x in idle_breakdown(t)[1]), reverse=True)[:5]
    assert summarize_device(t).gaps[0].launched_in == "aten::scaled_dot_product_attention"
