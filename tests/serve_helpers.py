"""A real `stepscope serve` in a subprocess for the tests, and small HTTP helpers."""
import http.client
import json
import socket
import subprocess
import sys
from pathlib import Path

from conftest import cli_env, wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, store: Path, *args: str) -> None:
        self.store = store
        self.port = free_port()
        self.log = store.parent / f"serve-{self.port}.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "stepscope", "serve", "--port", str(self.port), *args],
                                     env=cli_env(store), stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        wait_until(self._up, 60, f"`stepscope serve` to answer on port {self.port} (its output: {self.log})",
                   interval=0.1, ignore=(OSError,))

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"serve exited: {self.log.read_text()}")
        return self.get("/api/stats")[0] == 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read(), dict(r.getheaders())
        finally:
            c.close()

    def get(self, path: str):
        return self.request("GET", path)

    def post(self, path: str, body: bytes, headers: dict | None = None):
        return self.request("POST", path, body, headers)

    def stats(self) -> dict:
        return json.loads(self.get("/api/stats")[1])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def auth(key: str) -> dict:
    return {"X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7, sentry_client=test/1.0",
            "Content-Type": "application/x-sentry-envelope"}


def envelope(items: list[tuple[dict, bytes]], headers: dict | None = None) -> bytes:
    out = [json.dumps(headers or {}).encode()]
    for h, payload in items:
        out.append(json.dumps({**h, "length": len(payload)}).encode())
        out.append(payload)
    return b"\n".join(out) + b"\n"


def transaction(event_id: str, name: str = "tx", start: float = 1_795_000_000.0, dur: float = 0.5, n_spans: int = 3,
                profiler_id: str | None = None) -> bytes:
    spans = [{"span_id": f"{i + 2:016x}", "parent_span_id": f"{1:016x}", "op": "function", "description": f"mod.f{i % 3}",
              "start_timestamp": start + dur * i / (n_spans + 1), "timestamp": start + dur * (i + 1) / (n_spans + 1),
              "data": {"thread.id": "7", "thread.name": "MainThread"}} for i in range(n_spans)]
    contexts = {"trace": {"trace_id": "ab" * 16, "span_id": f"{1:016x}", "op": "task", "data": {"thread.id": "7"}}}
    if profiler_id:
        contexts["profile"] = {"profiler_id": profiler_id}
    return json.dumps({"type": "transaction", "event_id": event_id, "transaction": name, "start_timestamp": start,
                       "timestamp": start + dur, "contexts": contexts, "spans": spans, "platform": "python"}).encode()


def chunk(chunk_id: str, profiler_id: str, start: float, n: int = 50, hz: float = 100.0) -> bytes:
    frames = [{"function": "main", "module": "__main__", "abs_path": "/app/main.py", "lineno": 3},
              {"function": "f0", "module": "mod", "abs_path": "/app/mod.py", "lineno": 10}]
    return json.dumps({"version": "2", "profiler_id": profiler_id, "chunk_id": chunk_id, "platform": "python",
                       "profile": {"frames": frames, "stacks": [[1, 0]],
                                   "samples": [{"timestamp": start + k / hz, "thread_id": "7", "stack_id": 0} for k in range(n)],
                                   "thread_metadata": {"7": {"name": "MainThread"}}}}).encode()
