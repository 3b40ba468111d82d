"""The control server inside a long-running program: ``stepscope.start_server()``.

While idle it is one thread blocked in ``accept()``: no sampler, nothing patched. A capture request
(one JSON line over TCP on 127.0.0.1) carries a token that only this user can read (a 0600 file in a
0700 folder, ``runtime_dir()``); the capture opens a recording session (the named traces patched in,
the sampler on), waits for ``duration_s`` or for ``steps`` completed calls of ``span``, and closes it:
everything is unpatched (calls in flight finish normally), the run is in the store. A second request
during a capture gets ``{"error": "busy"}``; a client that disconnects ends the window at once.

Protocol: request ``{"token", "duration_s"?, "steps"?, "span"?, "traces": [...], "hz", "device_trace"?}``
(with ``device_trace`` the torch profiler records the window too, as ``stepscope run --device-trace``); replies
``{"status": "recording", "run_id", "store"}`` then ``{"status": "done", "run_id", "store", "spans",
"reason"}`` (or ``{"error": ...}``). Stdlib only.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..settings import Settings


def runtime_dir() -> Path:
    """Where servers publish their port and token: ``$STEPSCOPE_RUNTIME_DIR`` or ``<tmp>/stepscope-<uid>`` (0700)."""
    d = Path(os.environ.get("STEPSCOPE_RUNTIME_DIR") or Path(tempfile.gettempdir()) / f"stepscope-{os.getuid()}")
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    return d


class ControlServer:
    """Listens on ``host:port`` (0: any free port) and captures on request into ``store``."""

    def __init__(self, store: str | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = str(Path(store or os.environ.get("STEPSCOPE_STORE") or ".stepscope").resolve())
        self.token = secrets.token_hex(16)
        self._busy = threading.Lock()
        self._sock = socket.create_server((host, port))
        self.address = self._sock.getsockname()[:2]
        if host not in ("127.0.0.1", "localhost", "::1"):
            print(f"stepscope: control server bound to {host}, reachable from other hosts", file=sys.stderr)
        self.info_file = runtime_dir() / f"{os.getpid()}.json"
        fd = os.open(self.info_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": self.address[0], "port": self.address[1], "token": self.token,
                       "store": self.store, "argv": sys.argv}, f)
        self._thread = threading.Thread(target=self._serve, name="stepscope-control", daemon=True)
        self._thread.start()

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            try:
                self.info_file.unlink()
            except OSError:
                pass

    def _serve(self) -> None:
        from ..profiling.sampler import OWN_THREADS

        OWN_THREADS.add(threading.get_ident())
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), name="stepscope-capture", daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        from ..profiling.sampler import OWN_THREADS

        OWN_THREADS.add(threading.get_ident())
        with conn:
            try:
                conn.settimeout(10)
                req = json.loads(conn.makefile("r").readline() or "{}")
            except (OSError, ValueError):
                return
            if not hmac.compare_digest(str(req.get("token", "")), self.token):
                return _send(conn, {"error": "bad token"})
            if not self._busy.acquire(blocking=False):
                return _send(conn, {"error": "busy: another capture is running"})
            try:
                self._capture(req, conn)
            except Exception as e:  # never into the program
                _send(conn, {"error": f"{type(e).__name__}: {e}"})
            finally:
                self._busy.release()

    def _capture(self, req: dict, conn: socket.socket) -> None:
        from .. import api
        from ..session import Session, new_run_id
        from ..tracing.patch import normalize_targets

        if api.current_session() is not None:
            return _send(conn, {"error": "busy: the program is recording a run already (stepscope.init)"})
        span = req.get("span")
        steps = int(req["steps"]) if req.get("steps") else None
        duration = float(req["duration_s"]) if req.get("duration_s") else None
        if steps is None and duration is None:
            return _send(conn, {"error": "give duration_s or steps"})
        if steps is not None and not span:
            return _send(conn, {"error": "steps needs span"})
        device = bool(req.get("device_trace"))
        traces = list(req.get("traces") or []) + ([span] if span and span.count(".") >= 2 else [])
        if device:
            from ..tracing.syncs import SYNC_TARGETS

            traces += SYNC_TARGETS
        settings = Settings(functions_to_trace=tuple(normalize_targets(traces)), profiles_hz=req["hz"] if req.get("hz") is not None else 101.0,
                            flush_interval_s=0.2, store=self.store, device_trace=device,
                            extra={"capture": {"pid": os.getpid(), "span": span, "steps": steps, "duration_s": duration}})
        run_id = new_run_id()
        cap = None
        if device:  # before patching: every traced call of the window lies inside the device trace
            from ..device.capture import DeviceCapture

            cap = DeviceCapture(Path(self.store) / "runs" / run_id / "device_trace.json.gz")
            cap.start()
        session = Session(settings, run_id=run_id, command=list(sys.argv)).start()
        if cap is not None:
            session.on_finish(cap.stop)
        _send(conn, {"status": "recording", "run_id": session.run_id, "store": self.store})
        counter = sqlite3.connect(Path(self.store) / "runs.db", timeout=30)
        start = time.monotonic()
        reason = "duration"
        conn.setblocking(False)
        try:
            while True:
                time.sleep(0.05)
                if duration is not None and time.monotonic() - start >= duration:
                    break
                if steps is not None:
                    n = counter.execute("SELECT count(*) FROM spans WHERE run_id = ? AND (name = ? OR name LIKE ?)",
                                        (session.run_id, span, "%." + span)).fetchone()[0]
                    if n >= steps:
                        reason = "steps"
                        break
                if _gone(conn):
                    reason = "client disconnected"
                    break
        finally:
            session.set_outcome("ok", None)
            session.finish()
            counter.close()
        conn.setblocking(True)
        _send(conn, {"status": "done", "run_id": session.run_id, "store": self.store, "reason": reason})


def _gone(conn: socket.socket) -> bool:
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _send(conn: socket.socket, doc: dict) -> None:
    try:
        conn.sendall((json.dumps(doc) + "\n").encode())
    except OSError:
        pass


_server: ControlServer | None = None


def start_server(store: str | None = None, host: str = "127.0.0.1", port: int = 0) -> ControlServer:
    """Start (once) the control server of this process; returns it. See the module doc."""
    global _server
    if _server is None:
        _server = ControlServer(store, host, port)
        import atexit

        atexit.register(_server.close)
    return _server
