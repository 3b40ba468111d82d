"""The client side of ``stepscope capture``: find a process's control server and run a capture.

The pid a user has may not be the program's: ``$!`` after ``stepscope run --server -- python app.py &`` is
``stepscope run``'s, and a shell or a launcher script may sit above both. ``locate`` takes any of them: the
process that published a server under that pid, else the one descendant of it that did (several: a
one-line error naming them)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from ..core import procs
from ..record.control import RuntimeDirError, private_dir, runtime_dirs


class CaptureError(Exception):
    """No server to talk to, a refused capture, or a broken connection (message says which, one line)."""


def find_server(pid: int | None = None, address: str | None = None) -> dict | None:
    """The published info (host, port, token, store) of the server of ``pid`` or at ``host:port``, from
    the runtime folders that are private to this user (others are skipped)."""
    host, _, port = (address or "").rpartition(":")
    for d in runtime_dirs():
        try:
            private_dir(d, create=False)
        except RuntimeDirError:
            continue
        files = [d / f"{pid}.json"] if pid is not None else sorted(d.glob("*.json"))
        for p in files:
            try:
                info = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if pid is not None or (str(info.get("port")) == port and (not host or host in (info.get("host"), "localhost"))):
                return info
    return None


def servers() -> list[dict]:
    """The published info of every server of a live process, from the runtime folders private to this user."""
    out, seen = [], set()
    for d in runtime_dirs():
        try:
            private_dir(d, create=False)
        except RuntimeDirError:
            continue
        for p in sorted(d.glob("*.json")):
            try:
                info = json.loads(p.read_text())
                pid = int(info["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if pid not in seen and procs.alive(pid):
                seen.add(pid)
                out.append(info)
    return out


def app_of(info: dict) -> str:
    """The program a server runs in, in words (``procs.app_label``): its script or module and arguments."""
    return procs.app_label(info.get("command") or info.get("argv") or [], 60)


def locate(pid: int) -> dict | None:
    """The published info of the server that ``pid`` runs, or of the one process below ``pid`` that runs one
    (``pid`` a ``stepscope run --server``, a shell, a launcher script); then ``info["under"]`` is ``pid``.
    None when neither. Raises CaptureError when several processes below ``pid`` run one."""
    info = find_server(pid)
    if info is not None:
        return info
    below = [i for i in servers() if int(i["pid"]) != pid and procs.is_descendant(int(i["pid"]), pid)]
    if len(below) > 1:
        which = ", ".join(f"{i['pid']} ({app_of(i)})" for i in sorted(below, key=lambda i: int(i["pid"])))
        raise CaptureError(f"several programs under pid {pid} run a stepscope control server: {which}; "
                           "give one of them with --pid")
    return dict(below[0], under=pid) if below else None


def locate_job(pid: int) -> list[dict]:
    """The servers a capture of ``pid`` records: ``[locate(pid)]``, or, when ``pid``'s server (or the one server below
    ``pid`` that every other is below) has servers below it too (``stepscope run --server`` of a launcher: torchrun's
    ranks, a program's subprocesses), that one first, then the others in pid order: one job. [] when none. Raises
    CaptureError when several unrelated programs below ``pid`` run one (as ``locate``)."""
    own = find_server(pid)
    below = [i for i in servers() if int(i["pid"]) != pid and procs.is_descendant(int(i["pid"]), pid)]
    found = ([own] if own is not None else []) + below
    if len(found) <= 1:
        info = locate(pid)
        return [info] if info is not None else []
    pids = {int(i["pid"]) for i in found}
    roots = [i for i in found if not any(procs.is_descendant(int(i["pid"]), q) for q in pids - {int(i["pid"])})]
    if len(roots) > 1:
        locate(pid)  # (raises CaptureError naming them)
    top = roots[0]
    rest = sorted((i for i in found if i is not top), key=lambda i: int(i["pid"]))
    return [dict(top, under=pid) if int(top["pid"]) != pid else top, *rest]


def capture(info: dict, request: dict, on_recording=None, timeout: float | None = None) -> dict:
    """Send a capture request; call ``on_recording(reply)`` when the window opens; return the final reply.

    Raises CaptureError for a refusal (busy, bad token) or a lost connection.
    """
    try:
        sock = socket.create_connection((info["host"], int(info["port"])), timeout=10)
    except OSError as e:
        raise CaptureError(f"cannot reach the control server of pid {info.get('pid')} at {info['host']}:{info['port']}: "
                           f"{e.strerror or e}") from None
    with sock:
        sock.sendall((json.dumps(dict(request, token=info["token"])) + "\n").encode())
        sock.settimeout(timeout)
        f = sock.makefile("r")
        try:
            for line in f:
                reply = json.loads(line)
                if "error" in reply:
                    raise CaptureError(reply["error"])
                if reply.get("status") == "recording" and on_recording:
                    on_recording(reply)
                if reply.get("status") == "done":
                    return reply
        except TimeoutError:
            raise CaptureError(f"no answer from the control server of pid {info.get('pid')} in {timeout:g} s") from None
    raise CaptureError("the control server closed the connection before the capture ended")


def parse_duration(text: str, option: str = "--duration") -> float:
    """``10s``, ``500ms``, ``2m``, ``1.5`` (s) -> seconds, from 1 ms to 24 h. Raises ValueError naming the
    option and the text."""
    t = text.strip().lower()
    for suffix, scale in (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if t.endswith(suffix):
            t, mul = t[: -len(suffix)], scale
            break
    else:
        mul = 1.0
    try:
        v = float(t) * mul
    except ValueError:
        raise ValueError(f"{option} {text!r}: expected e.g. 10s, 500ms, 2m") from None
    if not 0.001 <= v <= 86400:  # (NaN fails this too)
        raise ValueError(f"{option}: must be between 1ms and 24h, got {text!r}")
    return v


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    return Path(f"/proc/{pid}").exists()
