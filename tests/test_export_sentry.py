"""`stepscope export --format sentry --dsn` (and `run --export sentry=DSN`): a real run of tests/programs/otlp_job.py
(two processes) sent as Sentry envelopes into a real `stepscope serve` (round trip: the same spans, parents,
durations and samples) and into Spotlight's sidecar when it is installed (benchmarks/serve_load.py installs it)."""

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli, wait_until
from jobrun import JOB, TRACE, record_job
from serve_helpers import Server, free_port

from stepscope.store.db import Store
from stepscope.store.reader import load_parts, load_run

SPOTLIGHT = Path.home() / ".cache" / "stepscope" / "spotlight" / "node_modules" / ".bin" / "spotlight"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The stored two-process run of otlp_job.py: (store, top run id)."""
    store = tmp_path_factory.mktemp("sentry-out") / "store"
    return store, record_job(store)


@pytest.fixture
def serve(tmp_path):
    store = tmp_path / "served"
    r = run_cli(["keys", "add", "--json"], store)
    assert r.returncode == 0, r.stderr
    srv = Server(store)
    srv.dsn = f"http://{json.loads(r.stdout)['public_key']}@127.0.0.1:{srv.port}/1"
    yield srv
    srv.stop()


def span_hex(prun: str, sid: int) -> str:
    return hashlib.sha256(f"stepscope-span:{prun}:{sid}".encode()).digest()[:8].hex()


def served_runs(store: Path, n: int) -> list:
    def runs():
        st = Store(store)
        try:
            got = st.list_runs()
            return got if len(got) >= n else None
        finally:
            st.close()
    return wait_until(runs, 60, f"{n} runs in the served store", ignore=(Exception,))


def test_round_trip_through_serve_gives_the_same_spans_and_samples(job, serve):
    store, rid = job
    r = run_cli(["export", "--format", "sentry", "--dsn", serve.dsn], store)
    assert r.returncode == 0, r.stderr
    assert "4 envelopes" in r.stderr  # a transaction and a profile chunk per process
    src = Store(store)
    parts = list(load_parts(src, rid))
    runs = served_runs(serve.store, 2)
    dst = Store(serve.store)
    by_proc = {run.env["tags"]["stepscope.process.run.id"]: run for run in runs}
    assert set(by_proc) == {p.run.id for p in parts}
    for p in parts:
        got = load_run(dst, by_proc[p.run.id].id)
        orig = {s.span_id: s for s in p.spans}
        root = next(s for s in p.spans if s.op == "transaction" and s.parent_id is None)
        served = {s.attrs["sentry.span_id"]: s for s in got.spans}
        assert len(served) == len(orig)
        by_id = {s.span_id: s for s in got.spans}
        for s in p.spans:
            g = served[span_hex(p.run.id, s.span_id)]
            assert g.name == s.name
            if s is not root and s.span_id != root.span_id:
                assert abs(g.duration_ns - s.duration_ns) <= 1000, (s.name, g.duration_ns, s.duration_ns)  # float s
                want_parent = orig[s.parent_id].name if s.parent_id is not None else root.name
                assert by_id[g.parent_id].name == want_parent
            if s.name == "__main__.boom":
                assert g.status == "error" and g.attrs["data"]["exception.type"] == "ValueError"
        # the samples: as many, at the same wall times (to 1 us), on the same stacks
        assert len(got.profile.sample_t_ns) == len(p.profile.sample_t_ns) > 0

        def stacks(d):
            fr, st_ = d.profile.frames, d.profile.stacks
            wall = [d.run.to_wall_ns(int(t)) for t in d.profile.sample_t_ns]
            return [(w, tuple((fr[f].function, fr[f].module, fr[f].file, fr[f].line) for f in st_[int(k)]))
                    for w, k in zip(wall, d.profile.sample_stack)]
        for (w0, s0), (w1, s1) in zip(stacks(p), stacks(got)):
            assert abs(w0 - w1) <= 1000 and s0 == s1
    src.close()
    dst.close()
    again = run_cli(["export", "--format", "sentry", "--dsn", serve.dsn], store)
    assert again.returncode == 0, again.stderr
    assert len(served_runs(serve.store, 2)) == 2, "the same run sent twice is stored once"


def test_large_runs_are_cut_into_events_of_the_same_trace(job, serve):
    """--spans-per-event 3: each process's spans go in transactions of at most 3 spans (the first the process's own,
    the others its parts); together they hold every span once."""
    store, rid = job
    r = run_cli(["export", "--format", "sentry", "--spans-per-event", "3", "--dsn", serve.dsn], store)
    assert r.returncode == 0, r.stderr
    src = Store(store)
    parts = list(load_parts(src, rid))
    src.close()
    want = sum(-(-(len(p.spans) - 1) // 3) for p in parts)
    runs = served_runs(serve.store, want)
    assert len(runs) == want and sum("(part " in r.command[0] for r in runs) == want - 2
    dst = Store(serve.store)
    ids = []
    for run in runs:
        spans = load_run(dst, run.id).spans
        assert len(spans) <= 4  # its root and at most 3 spans
        ids += [s.attrs["sentry.span_id"] for s in spans if s.op != "transaction" or "(part" not in s.name]
        assert run.env["sentry.trace_id"] == hashlib.sha256(f"stepscope-trace:{rid}".encode()).digest()[:16].hex()
    dst.close()
    assert sorted(ids) == sorted(span_hex(p.run.id, s.span_id) for p in parts for s in p.spans)


def test_refused_and_absent_receivers_and_run_export(job, serve, tmp_path):
    store, _ = job
    bad = run_cli(["export", "--format", "sentry", "--dsn", serve.dsn.replace("http://", "http://0bad")], store)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "HTTP 401" in bad.stderr, bad.stderr
    gone = run_cli(["export", "--format", "sentry", "--dsn", f"http://k@127.0.0.1:{free_port()}/1"], store)
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1 and "could not reach" in gone.stderr
    assert run_cli(["export", "--format", "sentry", "--dsn", "not-a-dsn"], store).returncode == 2
    mine = tmp_path / "mine"
    r = run_cli(["run", "-q", *TRACE, "--export", f"sentry={serve.dsn}", "--", sys.executable, JOB, "exit", "4"], mine)
    assert (r.returncode, r.stdout, r.stderr) == (4, "job done\n", "job stderr\n")
    assert served_runs(serve.store, 1)[0].command == [JOB]


def sse_events(port: int, want, timeout: float = 60) -> list:
    """Spotlight's own stream (GET /stream: every envelope it holds, as Server-Sent Events whose data is the parsed
    envelope [headers, [[item headers, payload], ...]]), read until ``want(envelopes)`` or the deadline."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", "/stream", headers={"Accept": "text/event-stream"})
    resp = c.getresponse()
    assert resp.status == 200
    got: list = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not want(got):
            line = resp.readline().decode()
            if line.startswith("data:"):
                got.append(json.loads(line[5:]))
    finally:
        c.close()
    return got


@pytest.mark.skipif(not SPOTLIGHT.exists(), reason=f"Spotlight's sidecar is not installed ({SPOTLIGHT}; "
                    "`python benchmarks/serve_load.py` installs it with npm)")
def test_export_into_spotlight(job):
    store, rid = job
    port = free_port()
    proc = subprocess.Popen([str(SPOTLIGHT), "server", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def up():
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                c.request("GET", "/health")
                return c.getresponse().status == 200
            finally:
                c.close()
        wait_until(up, 60, "Spotlight's sidecar to answer", ignore=(OSError,))
        r = run_cli(["export", "--format", "sentry", "--dsn", f"http://spotlight@127.0.0.1:{port}/0"], store)
        assert r.returncode == 0, r.stderr

        def items(envs):
            return [it for env in envs for it in env[1]]

        envs = sse_events(port, lambda e: len(items(e)) >= 4)
        txs = [p for h, p in items(envs) if h["type"] == "transaction"]
        chunks = [p for h, p in items(envs) if h["type"] == "profile_chunk"]
        src = Store(store)
        parts = list(load_parts(src, rid))
        src.close()
        assert sorted(len(t["spans"]) + 1 for t in txs) == sorted(len(p.spans) for p in parts)
        assert {t["contexts"]["profile"]["profiler_id"] for t in txs} == {c["profiler_id"] for c in chunks}
        assert sum(len(c["profile"]["samples"]) for c in chunks) == sum(len(p.profile.sample_t_ns) for p in parts)
        assert {t["contexts"]["trace"]["trace_id"] for t in txs} == {
            hashlib.sha256(f"stepscope-trace:{rid}".encode()).digest()[:16].hex()}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_profile_chunks_are_bounded_and_hold_every_sample(job):
    """Samples go in chunks of at most N samples and S seconds, each with only the frames and stacks it uses."""
    from stepscope.output.export.sentry_out import profile_chunks

    store, rid = job
    st = Store(store)
    part = next(load_parts(st, rid))
    st.close()
    chunks = list(profile_chunks(part, "ab" * 16, chunk_s=0.02, chunk_samples=5))
    assert len(chunks) > 2 and len({c["chunk_id"] for c in chunks}) == len(chunks)
    times = []
    for c in chunks:
        p = c["profile"]
        ts = [s["timestamp"] for s in p["samples"]]
        assert 0 < len(ts) <= 5 and ts[-1] - ts[0] < 0.02
        assert {s["stack_id"] for s in p["samples"]} == set(range(len(p["stacks"])))
        assert {f for stack in p["stacks"] for f in stack} == set(range(len(p["frames"])))
        assert {s["thread_id"] for s in p["samples"]} <= set(p["thread_metadata"])
        times += ts
    want = [part.run.to_wall_ns(int(t)) / 1e9 for t in part.profile.sample_t_ns]
    assert times == want
