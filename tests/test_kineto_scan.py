"""The C scanner of a Kineto trace's events (``device/native/kscan.c``) gives exactly the trace the msgspec reader
gives, or leaves the document to it: every column, the names, ``args[i]`` and the metadata compared between the two
(``STEPSCOPE_KSCAN=0`` forces the msgspec reader) on the shared traces from real GPUs and on synthetic documents of
every edge (escapes, numbers and null as names, string and float ids, nested args, every other phase, whitespace,
rounding halfway cases); a malformed document is refused with the same one-line error."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepscope.device import kineto, native
from stepscope.device.kineto import TraceError, load

pytestmark = pytest.mark.skipif(native.scan is None, reason=f"the trace scanner is not built here ({native.load_error})")

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
COLS = ("cat", "name", "ts", "dur", "pid", "tid", "correlation", "external_id", "stream", "device", "nbytes")


def _both(raw: bytes, tmp_path: Path, monkeypatch):
    """(scanned, msgspec) traces of ``raw``, and whether the scanner read it."""
    f = tmp_path / "t.json"
    f.write_bytes(raw)
    took = []
    real = native.scan
    monkeypatch.setattr(native, "scan", lambda b: took.append(real(b)) or took[-1])
    a = load(f, raw)
    monkeypatch.setattr(native, "scan", None)
    b = load(f, raw)
    monkeypatch.setattr(native, "scan", real)
    return a, b, bool(took) and took[-1] is not None


def _same(a, b) -> None:
    assert a.names == b.names
    for c in COLS:
        x, y = getattr(a, c), getattr(b, c)
        assert x.dtype == y.dtype and (x == y).all(), c
    assert list(a.args) == list(b.args)
    assert (a.base_ns, a.metadata, a.device_properties, a.distributed) == (
        b.base_ns, b.metadata, b.device_properties, b.distributed)


@pytest.mark.parametrize("path", sorted(SHARED.rglob("*.json.gz")), ids=lambda p: p.name)
def test_the_shared_traces_are_scanned_to_the_same_columns(path, tmp_path, monkeypatch):
    raw = gzip.decompress(path.read_bytes())
    a, b, scanned = _both(raw, tmp_path, monkeypatch)
    assert scanned, "the scanner left a real trace to the msgspec reader"
    assert len(a) > 0
    _same(a, b)


EVENTS = [
    {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1.5, "dur": 2.0005, "pid": 1, "tid": 2,
     "args": {"External id": 7, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"],
              "Concrete Inputs": ["", ""], "other": {"deep": [1, {"x": None}]}}},
    {"ph": "X", "name": "a\\u0062c", "cat": "kernel", "ts": 1e3, "dur": 0.0005, "pid": "Spans", "tid": 2.0,
     "args": {"correlation": 9.7, "stream": 7, "device": 0, "bytes": None}},
    {"ph": "X", "name": "abc", "cat": "k\\u0065rnel", "ts": 3, "pid": 1.0, "tid": None},
    {"ph": "X", "name": 5, "ts": -0.0, "dur": 1.0015},
    {"ph": "X", "name": 5.0, "ts": 0.0025, "cat": None, "dur": 2.5e-3, "args": {}},
    {"ph": "X", "name": None, "ts": 123456789.123456, "dur": 17},
    {"ph": "X", "ts": 4, "dur": 1, "cat": "unknown_cat", "name": "caf\u00e9 \u2603 \U0001F600"},
    {"ph": "M", "name": {"not": "a name"}, "args": [1, 2]},
    {"ph": "i", "ts": "later", "s": "t"},
    {"ph": "s", "id": 1, "ts": 1, "bp": "e"},
    {"ph": "C", "name": "counter", "args": {"v": 1.5}},
]


@pytest.mark.parametrize("indent", [None, 2])
def test_edge_events_are_read_as_msgspec_reads_them(indent, tmp_path, monkeypatch):
    text = json.dumps({"traceEvents": EVENTS, "baseTimeNanoseconds": 10, "deviceProperties": [{"id": 0}],
                       "schemaVersion": 1}, indent=indent, ensure_ascii=False).replace("\\\\u", "\\u")
    a, b, scanned = _both(text.encode(), tmp_path, monkeypatch)
    assert scanned
    _same(a, b)
    assert a.names[:3] == ["aten::mm", "abc", "5"]
    assert a.args[0]["Input Dims"] == [[2, 3], [3, 4]] and a.args[1]["correlation"] == 9
    # the bare array form
    a, b, scanned = _both(json.dumps(EVENTS).encode(), tmp_path, monkeypatch)
    assert scanned
    _same(a, b)


@pytest.mark.parametrize("doc, why", [
    (b'[{"ph": "X", "ts": "1", "dur": 1}]', "ts as a string"),
    (b'[{"ph": "X", "dur": 1}]', "no ts"),
    (b'[{"ph": "X", "ts": 1, "args": {"correlation": "7"}}]', "a string id"),
    (b'[{"ph": "X", "ts": 1, "ts": 2}]', "a repeated key"),
    (b'[{"ph": "Q", "ts": 1}]', "an unknown phase"),
    (b'[{"ts": 1}]', "no phase"),
    (b'[{"ph": "X", "ts": 1, "args": {"correlation": 99999999999999999999}}]', "an id past int64"),
    (b'[{"ph": "X", "ts": 1, "pid": [1]}]', "a list as pid"),
    (b'[{"ph": "X", "ts": 1, "\\u0070id": 3}]', "an escaped key"),
])
def test_what_the_scanner_leaves_to_msgspec_reads_the_same(doc, why, tmp_path, monkeypatch):
    f = tmp_path / "t.json"
    f.write_bytes(doc)
    assert native.scan(doc) is None, why
    monkeypatch.setattr(native, "scan", None)
    try:
        want = load(f, doc)
    except TraceError as e:
        want = str(e)
    monkeypatch.undo()
    try:
        got = load(f, doc)
    except TraceError as e:
        got = str(e)
    if isinstance(want, str):
        assert got == want
    else:
        _same(got, want)


@pytest.mark.parametrize("doc", [
    b'[{"ph": "X", "ts": 1}', b'[{"ph": "X", "ts": 1},]', b'[{"ph": "X", "ts": 1, "name": "\\q"}]',
    b'[{"ph": "X", "ts": 1, "name": "\xff"}]', b'[{"ph": "X", "ts": 01}]', b'[{"ph": "X", "ts": 1}] x',
    b'[{"ph": "X", "ts": 1, "name": "a\x01"}]', b'[{"ph": "X", "ts": 1, "args": {"a": [1,]}}]',
    b'[' + b'[' * 2000 + b']' * 2000 + b']',
])
def test_malformed_documents_are_refused_as_before(doc, tmp_path, monkeypatch):
    assert native.scan(doc) is None
    f = tmp_path / "bad.json"
    f.write_bytes(doc)
    monkeypatch.setattr(native, "scan", None)
    with pytest.raises(TraceError) as want:
        load(f, doc)
    monkeypatch.undo()
    with pytest.raises(TraceError) as got:
        load(f, doc)
    assert str(got.value) == str(want.value)


ident = st.one_of(st.integers(-2**40, 2**40), st.floats(-1e6, 1e6, allow_nan=False), st.none(),
                  st.text(max_size=6))
number = st.one_of(st.integers(-10**9, 10**9), st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False),
                   st.decimals(-1000, 1000, places=4).map(float))
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "M", "i", "f"])},
    optional={"name": st.one_of(st.text(max_size=5), st.integers(0, 3), st.none()),
              "cat": st.one_of(st.sampled_from(list(kineto.CATEGORIES) + ["zz", ""]), st.none()),
              "ts": number, "dur": number, "pid": ident, "tid": ident,
              "args": st.fixed_dictionaries({}, optional={
                  "correlation": st.one_of(st.integers(-5, 2**62), st.none()),
                  "External id": st.one_of(st.integers(0, 100), st.floats(0, 100)),
                  "stream": st.integers(0, 30), "bytes": st.integers(0, 2**40),
                  "Input Dims": st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=3),
                  "misc": st.recursive(st.none() | st.integers(), lambda c: st.lists(c, max_size=3), max_leaves=5)})})


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(events=st.lists(event, max_size=25), op=st.sampled_from(["aten::mm", "aten::addmm", "x"]))
def test_random_event_lists(events, op, tmp_path, monkeypatch):
    for i, e in enumerate(events):
        if e.get("name") in ("", 0):
            e["name"] = op
        if e["ph"] == "X" and "ts" not in e and i % 4:  # (most complete events with a ts: the scanner's case)
            e["ts"] = i * 1.5
    raw = json.dumps({"traceEvents": events}).encode()
    f = tmp_path / "t.json"
    f.write_bytes(raw)
    got = []
    for scan in (native.scan, None):
        monkeypatch.setattr(native, "scan", scan)
        try:
            got.append(load(f, raw))
        except TraceError as e:  # (a complete event without ts: the same one line both ways)
            got.append(str(e))
    monkeypatch.undo()
    if isinstance(got[1], str):
        assert got[0] == got[1]
    else:
        _same(*got)
