"""Fuzzed envelopes (hypothesis) against the ingest endpoint: random bytes, mutations of valid envelopes,
and valid envelopes with random JSON in their fields. Never a 500, never a crash; the server still
takes a valid envelope afterwards."""

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_helpers import auth, chunk, envelope, transaction
from starlette.testclient import TestClient

from stepscope.store import keys as keystore
from stepscope.store.db import Store
from stepscope.serve.web import ServerConfig, create_app

OK = {200, 400, 401, 413}
TRIED = {"n": 0}
STATUS: dict[int, int] = {}
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
PID = "e" * 32


def _profile_v1(eid: str) -> bytes:
    return json.dumps({"version": "1", "timestamp": 1_795_000_000.0, "transactions": [{"id": eid}],
                       "profile": {"frames": [{"function": "f", "module": "m", "lineno": 1}], "stacks": [[0]],
                                   "samples": [{"elapsed_since_start_ns": "1000", "thread_id": "7", "stack_id": 0}]}}).encode()


VALID = envelope([({"type": "transaction"}, transaction("d" * 32, profiler_id=PID)), ({"type": "profile"}, _profile_v1("d" * 32)),
                  ({"type": "profile_chunk"}, chunk("c" * 32, PID, 1_795_000_000.0, n=5))], {"event_id": "d" * 32})


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    store = tmp_path_factory.mktemp("fuzz") / "store"
    key = keystore.add(Store(store), "1").public_key
    app = create_app(ServerConfig(store=store, max_body_bytes=256 * 1024, max_decoded_bytes=1024 * 1024))
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
        c.key = key
        yield c
    print(f"\nfuzz: {TRIED['n']} envelopes tried, no 500 (answers: {dict(sorted(STATUS.items()))})")


def check(c, body: bytes, encoding: str | None = None) -> None:
    headers = auth(c.key)
    if encoding:
        headers["Content-Encoding"] = encoding
    r = c.post("/api/1/envelope/", content=body, headers=headers)
    TRIED["n"] += 1
    STATUS[r.status_code] = STATUS.get(r.status_code, 0) + 1
    assert r.status_code in OK, (r.status_code, r.text[:300], body[:300])
    if r.status_code != 200:
        assert r.json()["detail"]


@SETTINGS
@given(body=st.binary(max_size=2048), encoding=st.sampled_from([None, "gzip", "deflate", "br", "identity"]))
def test_random_bytes(client, body, encoding):
    check(client, body, encoding)


@SETTINGS
@given(data=st.data())
def test_mutated_valid_envelopes(client, data):
    body = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        i = data.draw(st.integers(0, max(len(body) - 1, 0)))
        if op == "flip" and body:
            body[i] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del body[i:]
        elif op == "insert":
            body[i:i] = data.draw(st.sampled_from([b"\n", b"{", b"}", b'"', b"-1", b"null", b"\xff", b"1e999", b"[]"]))
        elif op == "delete" and body:
            del body[i:i + data.draw(st.integers(1, 40))]
    enc = data.draw(st.sampled_from([None, "gzip"]))
    check(client, gzip.compress(bytes(body)) if enc else bytes(body), enc)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=20),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                    max_leaves=12)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


DOCS = [json.loads(transaction("d" * 32, profiler_id=PID)), json.loads(_profile_v1("d" * 32)),
        json.loads(chunk("c" * 32, PID, 1_795_000_000.0, n=3))]
TYPES = ["transaction", "profile", "profile_chunk"]


@SETTINGS
@given(data=st.data())
def test_random_json_in_the_fields(client, data):
    k = data.draw(st.integers(0, 2))
    doc = json.loads(json.dumps(DOCS[k]))
    paths = [p for p in _paths(doc) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = data.draw(JSON)
        except (KeyError, IndexError, TypeError):
            pass
    payload = json.dumps(doc, allow_nan=True).encode()
    check(client, envelope([({"type": TYPES[k]}, payload)]))


def test_still_takes_a_valid_envelope_after_the_fuzzing(client):
    eid = "9" * 32
    r = client.post("/api/1/envelope/", content=envelope([({"type": "transaction"}, transaction(eid, "after"))]),
                    headers=auth(client.key))
    assert r.status_code == 200
