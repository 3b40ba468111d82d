"""The control server inside a long-running program: ``stepscope.start_server()``.

While idle it is one thread blocked in ``accept()``: no sampler, nothing patched. A capture request
(one JSON line over TCP on 127.0.0.1) carries a token that only this user can read (a 0600 file in a
0700 folder of this user's, ``runtime_dir()``; a folder someone else owns or can write in is refused,
and then no server starts: one line on stderr, never an exception into the program); the capture opens
a recording session (the named traces patched in, the sampler on), waits for ``duration_s`` or for
``steps`` steps of ``span``, and closes it:
everything is unpatched (calls in flight finish normally), the run is in the store. A traced call still
running when the window ends is stored cut at the window's end (``attrs["stepscope.cut"]``: the session
keeps the calls open, ``Session(cut_open=True)``). A second request during a capture gets ``{"error":
"busy"}``; a client that disconnects ends the window at once.

The token file also names the program: ``command`` (its command line as the user gave it, stepscope's
launcher left out: ``procs.app_command``), which is each window's run command too; ``stepscope capture
--pid`` finds the file from the program's pid or from a parent's (``client.locate``).

Every window is bounded: it ends after ``timeout_s`` at the latest (default: 10 minutes, or the duration
if longer), and then the run is stored with status ``timeout``. ``steps`` counts denoising steps as the
pipeline does: calls of ``span`` that carry ``diffusion.step`` (the denoiser's forward) count once per step
value, however many calls a step makes (classifier-free guidance may call the UNet twice), a step being
complete once a later step began in its thread or it has as many calls as a complete step; other spans
count one per call. A ``span`` that the window does not trace is refused.

Protocol: request ``{"token", "duration_s"?, "steps"?, "span"?, "timeout_s"?, "traces": [...], "hz",
"device_trace"?}`` (with ``device_trace`` the device profiler records the window too, as ``stepscope run
--device-trace``: the window's session starts it as every session does, ``parts``; one that cannot start refuses the
window); replies ``{"status": "recording", "run_id", "store"}`` then ``{"status": "done", "run_id",
"store", "reason", "steps_done"}`` (reason: duration, steps, timeout or client disconnected), or
``{"error": ...}``. Stdlib only.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import socket
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

from .settings import DEFAULT_HZ, Settings
from ..store.db import Store, StoreError
from .sampling.sampler import start_thread


DEFAULT_TIMEOUT_S = 600.0


def span_traced(span: str, traces: list[str]) -> bool:
    """Whether a window tracing ``traces`` records spans named ``span`` (a qualified name, which the
    window traces itself, or the tail of a traced name or glob: ``UNet2DConditionModel.forward``)."""
    from fnmatch import fnmatchcase

    if span.count(".") >= 2:
        return True
    n = span.count(".") + 1
    for t in traces:
        if t == span or t.endswith("." + span):
            return True
        if any(c in t for c in "*?[") and fnmatchcase(span, ".".join(t.split(".")[-n:])):
            return True
    return False


def completed_steps(rows) -> int:
    """Completed steps among calls ``(thread id, diffusion.step or None)`` in start order (see the module doc)."""
    total = 0
    runs_by_thread: dict = {}
    for tid, step in rows:
        if step is None:
            total += 1
            continue
        runs = runs_by_thread.setdefault(tid, [])
        if runs and runs[-1][0] == step:
            runs[-1][1] += 1
        else:
            runs.append([step, 1])
    for runs in runs_by_thread.values():
        middle = [n for _, n in runs[1:-1]]  # began and ended inside the window: whole steps
        per_step = max(middle) if middle else None
        for i, (_, n) in enumerate(runs):
            if per_step is not None:
                total += n >= per_step
            else:
                total += i < len(runs) - 1
    return total


class RuntimeDirError(OSError):
    """No private folder to publish the server's port and token in (the message says why, one line)."""


def runtime_dirs() -> list[Path]:
    """Where servers may publish their port and token, best first: ``$STEPSCOPE_RUNTIME_DIR`` alone, or
    ``$XDG_RUNTIME_DIR/stepscope`` (when set) then ``<tmp>/stepscope-<uid>``."""
    if os.environ.get("STEPSCOPE_RUNTIME_DIR"):
        return [Path(os.environ["STEPSCOPE_RUNTIME_DIR"])]
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return ([Path(xdg) / "stepscope"] if xdg else []) + [Path(tempfile.gettempdir()) / f"stepscope-{os.getuid()}"]


def private_dir(d: Path, create: bool = True) -> Path:
    """``d`` if it is a folder (not a link) of this user's that no one else can write in; created 0700
    when missing (``create``), made 0700 when others could only read it. Raises RuntimeDirError."""
    if create:
        try:
            d.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass
        except OSError as e:
            raise RuntimeDirError(f"cannot create {d}: {e.strerror}") from None
    try:
        st = os.lstat(d)
    except OSError as e:
        raise RuntimeDirError(f"{d}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeDirError(f"{d} is not a folder")
    if st.st_uid != os.getuid():
        raise RuntimeDirError(f"{d} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})")
    if st.st_mode & 0o022:
        raise RuntimeDirError(f"{d} is writable by others (mode {stat.S_IMODE(st.st_mode):o})")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    return d


def runtime_dir() -> Path:
    """The folder this process publishes its server in: the first of ``runtime_dirs()`` that is private
    (``private_dir``). Raises RuntimeDirError naming why none is."""
    why = []
    for d in runtime_dirs():
        try:
            return private_dir(d)
        except RuntimeDirError as e:
            why.append(str(e))
    raise RuntimeDirError("; ".join(why))


def program_command() -> list[str]:
    """This program's command line as the user gave it: the interpreter's own argv (``sys.orig_argv``)
    without stepscope's launcher (``procs.app_command``)."""
    from ..core.procs import app_command

    return app_command(list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]))


class ControlServer:
    """Listens on ``host:port`` (0: any free port) and captures on request into ``store``. ``command``: the
    program's command line, for the runs and messages (default: ``program_command()``)."""

    def __init__(self, store: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 command: list[str] | None = None) -> None:
        self.store = str(Path(store or os.environ.get("STEPSCOPE_STORE") or ".stepscope").resolve())
        self.command = list(command) if command else program_command()
        self.token = secrets.token_hex(16)
        self._busy = threading.Lock()
        self.info_file = runtime_dir() / f"{os.getpid()}.json"  # first: a refused folder opens no socket
        self._sock = socket.create_server((host, port))
        self.address = self._sock.getsockname()[:2]
        if host not in ("127.0.0.1", "localhost", "::1"):
            print(f"stepscope: control server bound to {host}, reachable from other hosts", file=sys.stderr)
        from ..core.procs import run_facts

        fd = os.open(self.info_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as f:  # (facts: ppid, host, a torch.distributed rank's rank... for a job's capture)
            json.dump({"pid": os.getpid(), "host": self.address[0], "port": self.address[1], "token": self.token,
                       "store": self.store, "argv": sys.argv, "command": self.command, "facts": run_facts("exec")}, f)
        self._thread = threading.Thread(target=self._serve, name="stepscope-control", daemon=True)
        start_thread(self._thread)

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            try:
                self.info_file.unlink()
            except OSError:
                pass

    def _serve(self) -> None:
        from .sampling.sampler import OWN_THREADS, keep_signals_off_this_thread
        keep_signals_off_this_thread()

        me = threading.get_ident()
        OWN_THREADS.add(me)
        try:
            while True:
                try:
                    conn, _ = self._sock.accept()
                except OSError:
                    return
                start_thread(threading.Thread(target=self._handle, args=(conn,), name="stepscope-capture", daemon=True))
        finally:
            OWN_THREADS.discard(me)  # (an ident comes back for a new thread of the program's: that one is sampled)

    def _handle(self, conn: socket.socket) -> None:
        from .sampling.sampler import OWN_THREADS, keep_signals_off_this_thread
        keep_signals_off_this_thread()

        me = threading.get_ident()
        OWN_THREADS.add(me)
        try:
            self._handle_conn(conn)
        finally:
            OWN_THREADS.discard(me)

    def _handle_conn(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(10)
                req = json.loads(conn.makefile("r").readline() or "{}")
            except (OSError, ValueError, RecursionError):  # (a line nested ~1,000 levels deep: RecursionError)
                return
            if not isinstance(req, dict):  # nothing of a bad request reaches the program (its stderr included)
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
        from ..core.model import Capture, RunMeta
        from . import api
        from .session import Session, new_run_id
        from .tracing.patch import is_note
        from .tracing.resolve import normalize_targets

        if api.current_session() is not None:
            return _send(conn, {"error": "busy: the program is recording a run already (stepscope.init)"})
        span = req.get("span")
        steps = int(req["steps"]) if req.get("steps") else None
        duration = float(req["duration_s"]) if req.get("duration_s") else None
        if steps is None and duration is None:
            return _send(conn, {"error": "give duration_s or steps"})
        if steps is not None and not span:
            return _send(conn, {"error": "steps needs span"})
        timeout = float(req.get("timeout_s") or 0) or max(DEFAULT_TIMEOUT_S, duration or 0)
        device = bool(req.get("device_trace"))
        traces = list(req.get("traces") or []) + ([span] if span and span.count(".") >= 2 else [])
        if span and not span_traced(span, traces):
            return _send(conn, {"error": f"--span {span} is not traced in the window: name it in full "
                                         "(pkg.mod.Class.method) or --trace it"})
        settings = Settings(functions_to_trace=tuple(normalize_targets(traces)), profiles_hz=req["hz"] if req.get("hz") is not None else DEFAULT_HZ,
                            flush_interval_s=0.2, store=self.store, device_trace=device,
                            extra=RunMeta(capture=Capture(os.getpid(), span, steps, duration)).to_extra())
        run_id = new_run_id()
        session = Session(settings, run_id=run_id, command=list(self.command), cut_open=True, origin="window").start()
        if session.parts.failed:  # (the device trace could not start: said to the client, never to the program)
            session.set_outcome("failed", None, session.parts.failed[0])
            session.finish()
            _drop_run(self.store, run_id)
            return _send(conn, {"error": session.parts.failed[0]})
        if span:
            unresolved = session.patcher.unresolved
            why = [None if is_note(unresolved.get(t)) else unresolved.get(t) for t in traces if span_traced(span, [t])]
            if why and all(why):  # nothing that records the span could be patched
                session.set_outcome("failed", None, why[0])
                session.finish()
                _drop_run(self.store, run_id)
                return _send(conn, {"error": f"cannot trace --span {span}: {why[0]}"})
        _send(conn, {"status": "recording", "run_id": session.run_id, "store": self.store})
        counter = Store(self.store)
        start = time.monotonic()
        reason = "duration"
        done = 0
        conn.setblocking(False)
        try:
            while True:
                time.sleep(0.05)
                if duration is not None and time.monotonic() - start >= duration:
                    break
                if steps is not None:
                    done = _count_steps(counter, session.run_id, span)
                    if done >= steps:
                        reason = "steps"
                        break
                if time.monotonic() - start >= timeout:
                    reason = "timeout"
                    break
                if _gone(conn):
                    reason = "client disconnected"
                    break
        finally:
            if reason == "timeout":
                what = f": {done} of {steps} steps of {span}" if steps is not None else ""
                session.set_outcome("timeout", None, f"timed out after {timeout:g} s{what}")
            else:
                session.set_outcome("ok", None)
            session.finish()
            counter.close()
        conn.setblocking(True)
        _send(conn, {"status": "done", "run_id": session.run_id, "store": self.store, "reason": reason,
                     "steps_done": done, "timeout_s": timeout})


def _count_steps(store: Store, run_id: str, span: str) -> int:
    from ..core.steprules import STEP_ATTR

    try:
        rows = sorted(store.spans_named(run_id, lambda n: n == span or n.endswith("." + span)), key=lambda s: s[4])
    except StoreError:
        rows = []
    return completed_steps((s[6], s[8].get(STEP_ATTR) if s[8] else None) for s in rows)


def _drop_run(store: str, run_id: str) -> None:
    try:
        st = Store(store)
        st.delete_run(run_id)
        st.close()
    except Exception:
        pass


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


def start_server(store: str | None = None, host: str = "127.0.0.1", port: int = 0) -> ControlServer | None:
    """Start (once) the control server of this process; returns it. See the module doc. Never raises
    into the program: when it cannot start (no private runtime folder, no socket), one line on stderr
    says why and it returns None."""
    global _server
    if _server is None:
        try:
            _server = ControlServer(store, host, port)
        except OSError as e:
            why = str(e) if isinstance(e, RuntimeDirError) or not e.strerror else e.strerror
            print(f"stepscope: control server not started: {why}", file=sys.stderr)
            return None
        import atexit

        atexit.register(_server.close)
    return _server
