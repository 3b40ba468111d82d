"""`stepscope serve` bounds a request's head (web/headlimits.py): 64 KiB of request line and header fields, 100
fields; past either, 431 with `Connection: close`, and the server goes on. With both HTTP/1.1 parsers uvicorn runs:
httptools (the default) and h11 (`STEPSCOPE_HTTP=h11`). Requests go over raw sockets, as sent."""

import select
import socket
import subprocess
import sys

import pytest
from conftest import cli_env
from serve_helpers import Server

from stepscope.serve.web.headlimits import MAX_HEAD_BYTES, MAX_HEADER_FIELDS

KIB = 1024
MIB = 1024 * KIB


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(request, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STEPSCOPE_HTTP", request.param)
        srv = Server(tmp_path_factory.mktemp(request.param) / "store")
    srv.parser = request.param
    yield srv
    srv.stop()


def head(target: str = "/api/stats", fields: list[tuple[str, str]] = (), line: bytes | None = None) -> bytes:
    out = [line or f"GET {target} HTTP/1.1".encode(), b"Host: 127.0.0.1"]
    out += [f"{k}: {v}".encode() for k, v in fields]
    return b"\r\n".join(out) + b"\r\n\r\n"


def read_response(f) -> tuple[int, dict, bytes]:
    status = f.readline()
    assert status.startswith(b"HTTP/1.1 "), status[:200]
    headers = {}
    while (ln := f.readline()) not in (b"\r\n", b""):
        k, _, v = ln.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(status.split()[1]), headers, f.read(int(headers.get("content-length", 0)))


def exchange(srv, data: bytes) -> tuple[int, dict, bytes]:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
        s.sendall(data)  # (the server reads what it does not want until the client is done: no reset mid-send)
        return read_response(s.makefile("rb"))


def refused(srv, answer) -> None:
    status, headers, body = answer
    assert status == 431 and headers.get("connection") == "close", answer
    assert b"over 65536 bytes or over 100 fields" in body
    assert srv.get("/api/stats")[0] == 200  # the server goes on
    assert srv.proc.poll() is None


def test_serve_runs_the_parser_asked_for(server):
    """(Each parser answers a malformed request in its own way: httptools' 400 has a Content-Length, h11's not.)"""
    status, headers, _ = exchange(server, b"GET / HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n")
    assert status == 400 and ("content-length" in headers) == (server.parser == "httptools"), headers


def test_one_header_of_1_mib_is_431(server):
    refused(server, exchange(server, head(fields=[("X-Big", "a" * MIB)])))


def test_200_small_header_fields_are_431(server):
    refused(server, exchange(server, head(fields=[(f"X-H{i}", "v") for i in range(200)])))
    status, _, _ = exchange(server, head(fields=[(f"X-H{i}", "v") for i in range(MAX_HEADER_FIELDS - 1)]))  # + Host
    assert status == 200


def test_a_60_kib_header_block_is_answered_and_the_bound_is_per_request(server):
    block = [(f"X-H{i}", "b" * 1000) for i in range(60)]  # 60 fields of ~1 KiB: 60.6 KiB with the request line
    assert len(head(fields=block)) < MAX_HEAD_BYTES
    status, _, body = exchange(server, head(fields=block))
    assert status == 200 and b'"endpoint"' in body
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:  # keep-alive: 3 x 40 KiB heads
        f = s.makefile("rb")
        for _ in range(3):
            s.sendall(head(fields=[(f"X-H{i}", "c" * 1000) for i in range(40)]))
            assert read_response(f)[0] == 200
        s.sendall(head(fields=[("X-Big", "d" * (MAX_HEAD_BYTES + 1))]))
        status, headers, _ = read_response(f)
        assert status == 431 and headers["connection"] == "close"


def test_a_header_sent_slowly_is_431_once_it_crosses_the_bound(server):
    """Sent in 512-byte pieces, each followed by a look for the answer (at most 5 ms): the server answers as the head
    crosses 64 KiB, long before the client would have sent 1 MiB."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        sent = 0
        while sent < MIB and not select.select([s], [], [], 0.005)[0]:
            s.sendall(b"a" * 512)
            sent += 512
        assert MAX_HEAD_BYTES - 100 < sent < MIB, sent
        answer = read_response(s.makefile("rb"))
    refused(server, answer)


def test_a_request_line_of_1_mib_is_431(server):
    refused(server, exchange(server, head(target="/api/stats?q=" + "q" * MIB)))


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_server_stopped_while_it_lingers_on_a_refused_connection_stops_cleanly(parser, store, monkeypatch):
    monkeypatch.setenv("STEPSCOPE_HTTP", parser)
    srv = Server(store)
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
            s.sendall(head(fields=[("X-Big", "a" * (MAX_HEAD_BYTES + 1))]))
            assert read_response(s.makefile("rb"))[0] == 431
            srv.stop()  # (the client has not closed: the server still drops what it sends)
    finally:
        srv.stop()
    log = srv.log.read_text()
    # (uvicorn raises SIGTERM again once it has stopped: -15)
    assert srv.proc.returncode in (0, -15) and "Traceback" not in log and "Error" not in log, log[-3000:]


def test_an_unknown_parser_is_one_line(store):
    env = {**cli_env(store), "STEPSCOPE_HTTP": "picohttp"}
    r = subprocess.run([sys.executable, "-m", "stepscope", "serve", "--port", "1"], env=env, capture_output=True,
                       text=True, timeout=60, cwd=store.parent)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "stepscope: error: STEPSCOPE_HTTP: expected auto, httptools or h11, got 'picohttp'"
