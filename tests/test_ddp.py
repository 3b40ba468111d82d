"""DDP's gradient all-reduce joined from the flight recorder (``tracing.ddp``): which entries become the span, its
start, end, bytes and group, and what is left alone. The real job is in test_processes.py (torchrun, gloo)."""

import itertools

from stepscope.core.clock import Anchor
from stepscope.record.tracing.ddp import DDP_SPAN, FR_VARS, DdpJoin, enable_flight_recorder, entry_bytes

MS = 1_000_000
ANCHOR = Anchor(mono_ns=1_000 * MS, wall_ns=1_700_000_000_000 * MS)  # wall = mono + offset
SHIFT = ANCHOR.mono_ns - ANCHOR.wall_ns
TH = 140000000000001


def entry(rec, t_mono, name="gloo:all_reduce", thread=TH, sizes=((2177,),), dtypes=("Float",), seq=None):
    return {"record_id": rec, "profiling_name": name, "thread_id": str(thread), "input_sizes": [list(s) for s in sizes],
            "input_dtypes": list(dtypes), "time_created_ns": ANCHOR.to_wall_ns(t_mono),
            "collective_seq_id": seq if seq is not None else rec + 1, "process_group": ("0", "default_pg")}


def span(sid, op, t0, t1, parent=None, thread=TH, name="x"):
    return (sid, parent, name, op, t0, t1, thread, None, None)


def join(spans, entries, configs=None):
    j = DdpJoin(itertools.count(1000).__next__)
    return j, j.spans_for(spans, read=lambda: (entries, configs if configs is not None else
                                                 {"": {"name": "", "ranks": "[0, 1, 2, 3]"}}), shift=SHIFT)


def test_the_span_runs_from_the_last_bucket_launch_to_the_end_of_backward():
    back = span(7, "backward", 2000 * MS, 2200 * MS)
    entries = [entry(0, 1990 * MS),  # before backward: not its bucket
               entry(1, 2050 * MS, sizes=((1000,),)), entry(2, 2120 * MS, dtypes=("Half",)),
               entry(3, 2130 * MS, name="gloo:broadcast"),  # not an all-reduce
               entry(4, 2140 * MS, thread=TH + 1),  # another thread's
               entry(5, 2150 * MS, sizes=((10,),))]  # inside a Python-level collective span: that span's
    user_coll = span(8, "collective", 2149 * MS, 2151 * MS, parent=7, name="torch.distributed.distributed_c10d.all_reduce")
    _, out = join([back, user_coll], entries)
    assert len(out) == 1
    sid, parent, name, op, t0, t1, thread, err, attrs = out[0]
    assert (sid, parent, name, op, thread, err) == (1000, 7, DDP_SPAN, "collective", TH, None)
    assert (t0, t1) == (2120 * MS, 2200 * MS)
    assert attrs == {"collective.bytes": 1000 * 4 + 2177 * 2, "collective.buckets": 2,
                     "collective.overlapped_ns": 70 * MS, "collective.group": "WORLD", "collective.seq": 3,
                     "collective.group_size": 4}


def test_nothing_without_backward_or_without_buckets_and_dropped_entries_are_counted():
    j, out = join([span(1, "function", 0, 10 * MS)], [entry(0, 5 * MS)])
    assert out == []
    j, out = join([span(1, "backward", 2000 * MS, 2010 * MS)], [entry(0, 1000 * MS)])
    assert out == [] and j.missed == 0
    j.spans_for([span(2, "backward", 3000 * MS, 3010 * MS)], read=lambda: ([entry(50, 3005 * MS)], {}), shift=SHIFT)
    assert j.missed == 49  # records 1..49 left the ring between two reads


def test_bytes_and_the_recorder_is_sized_only_in_a_rank_that_did_not_size_it():
    assert entry_bytes({"input_sizes": [[2, 3], []], "input_dtypes": ["Double", "Long"]}) == 6 * 8 + 8
    env = {"RANK": "0"}
    assert enable_flight_recorder(env) and env[FR_VARS[0]] == "1024"
    env = {"RANK": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}  # the program's own choice (here: off) stays
    assert not enable_flight_recorder(env) and FR_VARS[0] not in env
    env = {}
    assert not enable_flight_recorder(env) and env == {}  # not a rank


def test_the_clocks_offset_is_read_tight():
    from stepscope.record.tracing.ddp import wall_to_mono
    import time

    a = wall_to_mono()
    m, w = time.perf_counter_ns(), time.time_ns()
    assert abs((m - w) - a) < 50_000_000  # the same offset as a plain reading, within a loaded machine's preemption


def test_a_program_that_imports_ddp_keeps_its_c_recorded_calls_in_span_blocks(tmp_path, monkeypatch):
    """Importing DDP's module (most diffusers apps do) starts the join, which reads only the Python probe's spans
    (backward, collective): the C recorder's calls still go to the store as span blocks, not as a tuple each (before:
    the tiny UNet's 13k traced calls a second cost the recorder 16 ms of GIL time a second as tuples, 4 ms as blocks),
    and the join still gets the Python probe's spans."""
    import sys

    import stepscope
    from stepscope.record import native
    from stepscope.record.spans import buffer

    if native.ext is None:
        import pytest

        pytest.skip(f"no C recorder here ({native.load_error})")
    mod = tmp_path / "ddp_blocks_mod.py"
    mod.write_text("def plain(i):\n    return i + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    blocks, joined = [], []
    take = buffer.take_native_blocks
    monkeypatch.setattr(buffer, "take_native_blocks", lambda *a: blocks.append(take(*a)) or blocks[-1])
    stepscope.init(functions_to_trace=["ddp_blocks_mod.plain"], profiles_hz=0, store=str(tmp_path / "store"),
                   transaction="ddp-blocks")
    try:
        session = stepscope.current_session()
        session.ddp = type("Join", (), {"spans_for": lambda self, spans: joined.extend(spans) or []})()
        import ddp_blocks_mod

        for i in range(1000):
            ddp_blocks_mod.plain(i)
        with stepscope.span("python-side"):
            pass
        session._flush()
    finally:
        stepscope.shutdown()
        sys.modules.pop("ddp_blocks_mod", None)
    assert sum(n for got in blocks for _, n, _ in got) == 1000  # the C recorder's calls, as blocks
    names = [s[2] for s in joined]  # the join saw the Python probe's spans (and the transaction's), no C call
    assert "python-side" in names and "ddp_blocks_mod.plain" not in names, names
