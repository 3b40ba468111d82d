"""Exports and the report's view model, checked against the formats' rules."""

import json
import sys

import pytest
from conftest import PROGRAMS, run_cli

from stepscope.core.model import Frame, Profile, Run, RunData, Span
from stepscope.output.html.view import build_view


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    store = tmp_path_factory.mktemp("export") / "store"
    r = run_cli(["run", "-q", "--hz", "499", "--trace", "__main__.hot", "--trace", "__main__.cold", "--trace", "__main__.spin",
                 "--", sys.executable, str(PROGRAMS / "shape.py"), "0.5"], store)
    assert r.returncode == 0, r.stderr
    return store


def test_speedscope_document_is_well_formed(recorded, tmp_path):
    out = tmp_path / "p.speedscope.json"
    assert run_cli(["export", "--format", "speedscope", "-o", str(out)], recorded).returncode == 0
    doc = json.loads(out.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    nframes = len(doc["shared"]["frames"])
    sampled = [p for p in doc["profiles"] if p["type"] == "sampled"]
    evented = [p for p in doc["profiles"] if p["type"] == "evented"]
    assert sampled and evented
    for p in sampled:
        assert len(p["samples"]) == len(p["weights"]) > 0 and p["unit"] == "nanoseconds"
        assert all(0 <= f < nframes for s in p["samples"] for f in s)
    for p in evented:  # speedscope rejects unbalanced or out-of-order events
        stack, last = [], -1
        for e in p["events"]:
            assert e["at"] >= last
            last = e["at"]
            if e["type"] == "O":
                stack.append(e["frame"])
            else:
                assert stack.pop() == e["frame"]
        assert not stack
    names = {doc["shared"]["frames"][e["frame"]]["name"] for p in evented for e in p["events"]}
    assert {"__main__.hot", "__main__.cold", "__main__.spin"} <= names


def test_chrome_trace_is_well_formed(recorded, tmp_path):
    out = tmp_path / "p.trace.json"
    assert run_cli(["export", "--format", "chrome", "-o", str(out)], recorded).returncode == 0
    ev = json.loads(out.read_text())["traceEvents"]
    spans = [e for e in ev if e["ph"] == "X"]
    assert sum(1 for e in spans if e["name"] == "__main__.hot") == 10
    per_tid = {}
    for e in ev:
        if e["ph"] in "BE":
            per_tid.setdefault(e["tid"], []).append(e)
    assert per_tid
    for events in per_tid.values():  # B/E balanced and in time order per track
        depth, last = 0, -1.0
        for e in events:
            assert e["ts"] >= last
            last = e["ts"]
            depth += 1 if e["ph"] == "B" else -1
            assert depth >= 0
        assert depth == 0
    assert {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"} >= {"MainThread", "MainThread (samples)"}


def test_view_downsamples_large_profiles_and_keeps_the_time():
    n = 250_000
    frames = [Frame("f", "m", "m.py", 1), Frame("g", "m", "m.py", 2)]
    prof = Profile(frames=frames, stacks=[(0,), (0, 1)], sample_t_ns=[i * 1_000_000 for i in range(n)],
                   sample_thread=[7] * n, sample_stack=[i % 2 for i in range(n)], hz=1000, thread_names={7: "MainThread"})
    run = Run(id="r", command=["x"], start_ns=0, end_ns=n * 1_000_000, anchor_wall_ns=1)
    data = RunData(run, [Span(1, None, "s", "function", 0, 10_000_000, 7)], prof)
    v = build_view(data, max_samples=100_000)
    p = v["profile"]
    assert p["downsampled"] == 3 and len(p["t"]) <= 100_000 and p["total_samples"] == n
    assert abs(sum(p["w"]) - n * 1000) / (n * 1000) < 0.01  # us: the sampled time is kept
