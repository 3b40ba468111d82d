"""The ingest's column-at-a-time check of profile samples (``sentry._fast_samples``) gives exactly what the
sample-by-sample loop gives: the same records for every valid profile, and for every malformed one the same
one-line error naming the first bad sample; the writer's transport (``writer.pack``) gives back the batch."""

import datetime
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepscope.serve.ingest import sentry
from stepscope.serve.ingest.envelope import EnvelopeError, parse
from stepscope.serve.ingest.writer import pack, unpack

EID = "a" * 32
VALUES = st.one_of(st.integers(-3, 2 ** 51), st.text("0123456789 -x²", max_size=6), st.floats(allow_nan=True),
                   st.none(), st.booleans(), st.just("140000"), st.just("7"))


def _envelope(kind: str, samples: list) -> bytes:
    prof = {"frames": [{"function": "f", "module": "m", "lineno": 1}, {"function": "g", "module": "m", "lineno": 2}],
            "stacks": [[0], [1, 0]], "samples": samples, "thread_metadata": {"7": {"name": "MainThread"}}}
    if kind == "profile":
        doc = {"version": "1", "timestamp": 1_795_000_000.0, "transactions": [{"id": EID}], "profile": prof}
    else:
        doc = {"version": "2", "profiler_id": "b" * 32, "chunk_id": "c" * 32, "profile": prof}
    payload = json.dumps(doc).encode()
    return b"{}\n" + json.dumps({"type": kind, "length": len(payload)}).encode() + b"\n" + payload + b"\n"


def _outcome(body: bytes):
    try:
        b = sentry.batch(parse(body))
    except EnvelopeError as e:
        return "error", str(e)
    except Exception as e:  # (the endpoint answers these 400 too; both paths must agree on them)
        return "crash", type(e).__name__
    return "ok", [(p.frames, p.stacks, p.samples, p.thread_names) for p in b.profiles + b.chunks]


def _both(monkeypatch, body: bytes):
    fast = _outcome(body)
    with monkeypatch.context() as m:
        m.setattr(sentry, "_fast_samples", lambda *a: None)
        slow = _outcome(body)
    return fast, slow


SAMPLE = st.fixed_dictionaries({}, optional={"stack_id": st.one_of(st.integers(-1, 2), VALUES),
                                             "thread_id": VALUES, "elapsed_since_start_ns": VALUES,
                                             "timestamp": st.one_of(st.floats(1.7e9, 1.8e9), VALUES)})


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(kind=st.sampled_from(["profile", "profile_chunk"]),
       samples=st.lists(st.one_of(SAMPLE, st.integers(), st.just([])), max_size=6))
def test_the_fast_check_agrees_with_the_loop_on_any_samples(monkeypatch, kind, samples):
    fast, slow = _both(monkeypatch, _envelope(kind, samples))
    assert fast == slow


@pytest.mark.parametrize("kind", ["profile", "profile_chunk"])
def test_valid_samples_take_the_fast_path_and_come_out_sorted(monkeypatch, kind):
    samples = [{"stack_id": k % 2, "thread_id": "7", "elapsed_since_start_ns": str(1000 * (5 - k)),
                "timestamp": 1_795_000_000.0 + (5 - k) / 100} for k in range(5)]
    calls = []
    real = sentry._fast_samples
    monkeypatch.setattr(sentry, "_fast_samples", lambda *a: calls.append(1) or real(*a))
    status, ((_, _, got, names),) = _outcome(_envelope(kind, samples))
    assert status == "ok" and calls and names == {7: "MainThread"}
    assert [s[0] for s in got] == sorted(s[0] for s in got) and {s[1] for s in got} == {7}
    assert real(samples, 2, lambda s: None) is None  # no times: the loop decides


def test_the_writer_transport_gives_back_the_batch():
    body = _envelope("profile", [{"stack_id": 1, "thread_id": "7", "elapsed_since_start_ns": "10"}])
    tx = {"event_id": EID, "start_timestamp": 1_795_000_000.0, "timestamp": 1_795_000_001.0, "transaction": "t",
          "spans": [{"span_id": "1" * 16, "start_timestamp": 1_795_000_000.1, "timestamp": 1_795_000_000.2,
                     "data": {"big": 2 ** 80, "nested": [{"x": None}]}}]}
    payload = json.dumps(tx).encode()
    body += json.dumps({"type": "transaction", "length": len(payload)}).encode() + b"\n" + payload + b"\n"
    b = sentry.batch(parse(body))
    raw = pack(7, b, "1")
    assert raw[:1] == b"M" and unpack(raw) == (7, b, "1")
    b.transactions[0].meta["when"] = datetime.date(2026, 1, 1)  # a value marshal does not know: pickled instead
    raw = pack(8, b, None)
    assert raw[:1] == b"P" and unpack(raw) == (8, b, None)
