"""Run a program under stepscope in a child process (``stepscope run``, ``stepscope demo``).

The child is the user's own interpreter started as ``python [interpreter options] -m stepscope.launch
(SCRIPT | -m MODULE | -c CODE) ARGS``; the run row is created here first, so a child that dies hard
(SIGKILL, os._exit) still leaves a run with its exit status. Ctrl-C reaches the child (same process
group) and the child records it; this process waits for it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import clock
from .launch import ENV_VAR
from .model import Run
from .session import new_run_id
from .settings import Settings
from .store.db import Store

# interpreter options that take a value (python --help)
_OPTS_WITH_VALUE = {"-W", "-X", "-Q", "--check-hash-based-pycs"}


class CommandError(ValueError):
    """The command cannot be run under stepscope (the message says why, in one line)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a recorded run ended: ``exit_code`` as the shell sees it (128+N for signal N)."""

    run_id: str
    returncode: int

    @property
    def exit_code(self) -> int:
        return 128 - self.returncode if self.returncode < 0 else self.returncode


def _is_python(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith("python") or name in ("py", "pypy", "pypy3")


def _shebang_python(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            line = f.readline(256)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    parts = line[2:].decode(errors="replace").split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        exe = shutil.which(parts[1])
        return exe if exe and _is_python(exe) else None
    return parts[0] if _is_python(parts[0]) else None


def child_argv(command: list[str]) -> list[str]:
    """The argv that runs ``command`` through ``stepscope.launch``.

    ``command`` is ``[python, *interpreter options, SCRIPT | -m MOD | -c CODE, *args]``, or an executable
    Python script (its ``#!`` names a python). Raises CommandError otherwise.
    """
    if not command:
        raise CommandError("no command given: stepscope run [OPTIONS] -- python SCRIPT [ARGS]")
    exe = command[0]
    if not _is_python(exe):
        resolved = shutil.which(exe) or exe
        interp = _shebang_python(resolved)
        if interp is None:
            raise CommandError(f"{exe}: not a Python interpreter or a Python script (stepscope runs Python programs)")
        return [interp, "-m", "stepscope.launch", resolved, *command[1:]]
    i = 1
    while i < len(command):
        a = command[i]
        if a in ("-m", "-c"):
            if i + 1 >= len(command):
                raise CommandError(f"{a} needs an argument")
            break
        if a in _OPTS_WITH_VALUE:
            i += 2
            continue
        if a.startswith("-") and a != "-":
            i += 1
            continue
        break
    else:
        raise CommandError("no script given: stepscope run -- python SCRIPT [ARGS] (interactive sessions are not profiled)")
    return [exe, *command[1:i], "-m", "stepscope.launch", *command[i:]]


def _same_interpreter(exe: str) -> bool:
    found = shutil.which(exe) or exe
    try:
        return os.path.samefile(found, sys.executable)
    except OSError:
        return False


def run_program(command: list[str], settings: Settings, store: Store, *, run_id: str | None = None,
                env: dict[str, str] | None = None, server_only: bool = False) -> Outcome:
    """Run ``command`` recorded with ``settings`` into ``store``; wait for it; return how it ended.

    ``server_only``: record nothing, only start the control server in the program (``stepscope capture``
    records windows of it on demand); no run is created. The program inherits stdin/stdout/stderr
    untouched. Raises CommandError for a command that is not a Python program (before anything runs).
    """
    argv = child_argv(command)
    run_id = run_id or new_run_id()
    anchor = clock.Anchor.take()
    if not server_only:
        store.create_run(Run(id=run_id, command=list(command), cwd=os.getcwd(), host=socket.gethostname(),
                             start_ns=anchor.mono_ns, anchor_mono_ns=anchor.mono_ns, anchor_wall_ns=anchor.wall_ns,
                             settings=settings.to_dict()), anchor.wall_ns)
    child_env = dict(os.environ if env is None else env)
    settings_dict = settings.to_dict()
    settings_dict["store"] = str(Path(store.path).resolve())
    child_env[ENV_VAR] = json.dumps({"run_id": run_id, "settings": settings_dict, "command": list(command),
                                     "server_only": server_only})
    tmp = None
    if not _same_interpreter(argv[0]):
        # make this stepscope importable by another interpreter (the collect side is stdlib-only)
        tmp = tempfile.mkdtemp(prefix="stepscope-path-")
        os.symlink(Path(__file__).resolve().parent, Path(tmp) / "stepscope")
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [tmp, child_env.get("PYTHONPATH")]))
    try:
        proc = subprocess.Popen(argv, env=child_env)
    except OSError as e:
        store.update_run(run_id, status="error", exit_code=127, error=f"cannot start {argv[0]}: {e.strerror}")
        raise CommandError(f"cannot start {argv[0]}: {e.strerror}") from None
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child gets Ctrl-C and records it
    try:
        returncode = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if server_only:
        return Outcome("", returncode)
    _settle(store, run_id, returncode)
    return Outcome(run_id, returncode)


def _settle(store: Store, run_id: str, returncode: int) -> None:
    """Make the run's status agree with the process's real end (the child may have died unannounced)."""
    run = store.get_run(run_id)
    fields: dict = {"exit_code": returncode if returncode >= 0 else 128 - returncode}
    if run.status == "running":
        if returncode < 0:
            sig = -returncode
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
            fields.update(status={signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}.get(sig, "killed"),
                          error=name)
        else:
            fields.update(status="ok" if returncode == 0 else "error",
                          error=None if returncode == 0 else f"exit status {returncode}")
        if run.end_ns is None:
            fields["end_ns"] = clock.now_ns()
    store.update_run(run_id, **fields)
