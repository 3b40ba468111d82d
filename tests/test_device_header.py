"""Issue 39, item 6: `stepscope device`'s header says what the trace knows of its device. A real NCCL job's rank
trace (``../shared/traces/multirank``: kernels on streams 7, 23, 25, 84, 203, no ``deviceProperties``) is a GPU
trace with an unnamed device, not "CPU only"."""

from pathlib import Path

import pytest
from conftest import run_cli

from stepscope.device.analysis import DeviceSummary, OpStat, StreamIdle
from stepscope.output.terminal.device import device_words

MULTIRANK = Path(__file__).resolve().parents[2] / "shared" / "traces" / "multirank"


@pytest.mark.skipif(not MULTIRANK.is_dir(), reason="../shared/traces/multirank is not beside this checkout")
def test_a_rank_trace_without_device_properties_is_not_cpu_only(store):
    r = run_cli(["device", str(MULTIRANK / "rank-0.json.gz")], store)
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert "GPU kernels on 5 streams, device unnamed" in head and "CPU only" not in head, head


def _summary(device, streams, kernels=()) -> DeviceSummary:
    return DeviceSummary("t.json", device, 10, 1000, [StreamIdle(d, s, 1, 10, 5, 5, 5, 0, 0) for d, s in streams],
                         [], [], [], list(kernels))


def test_device_words():
    assert device_words(_summary("NVIDIA H100", [(0, 7)])) == "device NVIDIA H100"
    assert device_words(_summary(None, [])) == "device CPU only"
    assert device_words(_summary(None, [(0, 7)])) == "GPU kernels on 1 stream, device unnamed"
    assert device_words(_summary(None, [(0, 7), (1, 7), (1, 9)])) == "GPU kernels on 2 devices, 3 streams, devices unnamed"
    assert device_words(_summary(None, [], [OpStat("k", 1, 1, 1)])) == "GPU kernels, device unnamed"
