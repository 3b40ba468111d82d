"""Issue 39, item 7: an OTLP-ingested run is named by its resource's `service.name` (what users look for in
`stepscope runs`; the root span's name only without one), and an errored span keeps the message the SDK sent with
its exception type (the `exception` event's `exception.message`, else the status message): the span's
`exception.message`, the run's error "TYPE: message", and the report's span text."""

import json

import pytest
from conftest import run_cli
from starlette.testclient import TestClient

from stepscope.store import keys as keystore
from stepscope.store.db import Store
from stepscope.store.reader import load_run
from stepscope.serve.web import ServerConfig, create_app

pytest.importorskip("opentelemetry.proto")

T0 = 1_795_000_000 * 10**9


def _kv(key, value):
    return {"key": key, "value": {"stringValue": value}}


def _request(service, trace="ab" * 16):
    """An OTLP/JSON request as a Node SDK sends it: a root `generate` that failed (its exception event), a child with
    a status message only."""
    root = {"traceId": trace, "spanId": "01" * 8, "name": "generate", "kind": 1, "startTimeUnixNano": str(T0),
            "endTimeUnixNano": str(T0 + 50_000_000), "status": {"code": 2, "message": "Error: CUDA out of memory"},
            "events": [{"name": "exception", "timeUnixNano": str(T0 + 49_000_000),
                        "attributes": [_kv("exception.type", "Error"), _kv("exception.message", "CUDA out of memory")]}]}
    child = {"traceId": trace, "spanId": "02" * 8, "parentSpanId": "01" * 8, "name": "unet", "kind": 1,
             "startTimeUnixNano": str(T0 + 1_000_000), "endTimeUnixNano": str(T0 + 40_000_000),
             "status": {"code": 2, "message": "TimeoutError: the step took 30 s"}}
    resource = {"attributes": [_kv("service.name", service)] if service else []}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {"name": "sd"}, "spans": [root, child]}]}]}


@pytest.fixture
def client(tmp_path):
    store = tmp_path / "store"
    key = keystore.add(Store(store), "1").public_key
    app = create_app(ServerConfig(store=store, max_body_bytes=2 * 1024 * 1024, max_decoded_bytes=8 * 1024 * 1024))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        c.key, c.store = key, store
        yield c


def _post(c, doc):
    r = c.post("/v1/traces", content=json.dumps(doc).encode(),
               headers={"Content-Type": "application/json", "X-Sentry-Auth": f"Sentry sentry_key={c.key}"})
    assert r.status_code == 200, r.text


def test_the_run_is_named_by_service_name_and_keeps_the_error_message(client):
    _post(client, _request("node-sd-proto"))
    st = Store(client.store)
    data = load_run(st)
    st.close()
    assert data.run.command == ["node-sd-proto"]
    assert data.run.status == "error" and data.run.error == "Error: CUDA out of memory"
    by = {s.name: s for s in data.spans}
    assert by["generate"].error_type == "Error" and by["generate"].attrs["exception.message"] == "CUDA out of memory"
    assert by["unet"].error_type == "TimeoutError: the step took 30 s"  # (no event: the status message names it)
    r = run_cli(["runs"], client.store)
    assert r.returncode == 0 and "node-sd-proto" in r.stdout and "generate" not in r.stdout, r.stdout


@pytest.mark.parametrize("service", [None, "unknown_service:node"])
def test_without_a_service_name_the_root_names_the_run(client, service):
    _post(client, _request(service))
    st = Store(client.store)
    assert [r.command for r in st.list_runs()] == [["generate"]]
    st.close()


def test_the_report_shows_the_message_with_the_type(client):
    from stepscope.output.html.html import report_script
    from stepscope.output.html.view import build_view
    from stepscope.store.reader import load_run as load

    _post(client, _request("node-sd-proto"))
    st = Store(client.store)
    view = build_view(load(st))
    st.close()
    spans = view["spans"]
    i = spans["error"].index("Error")
    assert spans["attrs"][i]["exception.message"] == "CUDA out of memory"
    js = report_script()
    assert 'error: ${errorText(i)}' in js and '`${S.error[i]}: ${m}`' in js
