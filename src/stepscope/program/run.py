"""Run a program under stepscope in a child process (``stepscope run``, ``stepscope demo``).

The child is the user's own interpreter started as ``python [interpreter options] -m stepscope.record.launch
(SCRIPT | -m MODULE | -c CODE) ARGS``; the run row is created here first, so a child that dies hard
(SIGKILL, os._exit) still leaves a run with its exit status.

Signals (``RELAYED``) sent to this process reach the program once, as if sent to it: the child stays in
this process group, so a signal sent to the group (Ctrl-C in a terminal, ``timeout``, ``kill -- -PGID``)
reaches it directly and is not passed on again; one sent to this process only is passed on. To tell them
apart, the child's signal wakeup fd is a pipe to this process (``launch`` sets it): Python writes one
byte per signal its handlers receive. The child dies with this process (``PR_SET_PDEATHSIG``, Linux).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..core import clock
from ..record.endsignals import signal_status
from ..record.launchspec import ENV_VAR, FOLLOW_VAR, LaunchSpec
from ..core.model import Run
from ..record.processes import OPTS_WITH_VALUE, hook_installed, path_folder
from ..record.session import new_run_id
from ..record.settings import Settings
from ..store.db import DbError, Store, write_error_text



class CommandError(ValueError):
    """The command cannot be run under stepscope (the message says why, in one line)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a recorded run ended: ``exit_code`` as the shell sees it (128+N for signal N). ``run_id`` is
    empty when nothing was stored (``server_only``, or the program could not start)."""

    run_id: str
    returncode: int
    store_error: str | None = None  # the run's end could not be written (e.g. "store full at PATH")

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


def child_argv(command: list[str], launcher: str = "stepscope.record.launch") -> list[str]:
    """The argv that runs ``command`` through ``launcher`` (a module run with ``-m``: ``stepscope.record.launch``, or
    ``stepscope.fixes.child`` for ``stepscope try``).

    ``command`` is ``[python, *interpreter options, SCRIPT | -m MOD | -c CODE, *args]``, an executable Python
    script (its ``#!`` names a python), or a ``.py`` file (run by ``sys.executable``). Raises CommandError
    otherwise.
    """
    if not command:
        raise CommandError("no command given: stepscope run [OPTIONS] -- python SCRIPT [ARGS]")
    exe = command[0]
    if not _is_python(exe):
        resolved = shutil.which(exe) or exe
        interp = _shebang_python(resolved)
        if interp is None and resolved.endswith((".py", ".pyw")) and os.path.isfile(resolved):
            interp = sys.executable  # a script without ``#!``: run by this interpreter, as ``python SCRIPT`` is
        if interp is None:
            raise CommandError(f"{exe}: not a Python interpreter or a Python script (stepscope runs Python programs)")
        return [interp, "-m", launcher, resolved, *command[1:]]
    i = 1
    while i < len(command):
        a = command[i]
        if a in ("-m", "-c"):
            if i + 1 >= len(command):
                raise CommandError(f"{a} needs an argument")
            break
        if a in OPTS_WITH_VALUE:
            i += 2
            continue
        if a.startswith("-") and a != "-":
            i += 1
            continue
        break
    else:
        raise CommandError("no script given: stepscope run -- python SCRIPT [ARGS] (interactive sessions are not profiled)")
    return [exe, *command[1:i], "-m", launcher, *command[i:]]


def _env_root(path: str) -> str | None:
    """The virtual environment that the interpreter at ``path`` (as named, links not followed) belongs to: the
    folder with ``pyvenv.cfg`` beside its ``bin`` folder (or beside it), or None."""
    here = os.path.dirname(os.path.abspath(path))
    for d in (here, os.path.dirname(here)):
        if os.path.isfile(os.path.join(d, "pyvenv.cfg")):
            return os.path.realpath(d)
    return None


def _same_interpreter(exe: str) -> bool:
    """Whether ``exe`` is this interpreter in this environment (the one stepscope runs in): the same binary and the
    same virtual environment, if any (two venvs of one Python share its binary, not their packages)."""
    found = shutil.which(exe) or exe
    try:
        if not os.path.samefile(found, sys.executable):
            return False
    except OSError:
        return False
    return _env_root(found) == _env_root(sys.executable)


def run_program(command: list[str], settings: Settings, store: Store, *, run_id: str | None = None,
                env: dict[str, str] | None = None, server_only: bool = False, on_server=None) -> Outcome:
    """Run ``command`` recorded with ``settings`` into ``store``; wait for it; return how it ended.

    ``server_only``: record nothing, only start the control server in the program (``stepscope capture``
    records windows of it on demand); no run is created. ``on_server(info)`` is then called once (in this
    process) as soon as the server accepts captures: its token file is published (``info``: its contents,
    ``control.client.find_server``); ``launch`` tells this process by a SIGCHLD of its own, sent after the
    server started and before the program's code runs. The program inherits stdin/stdout/stderr
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
    spec = LaunchSpec(dataclasses.replace(settings, store=str(Path(store.path).resolve())), run_id=run_id,
                      command=tuple(command), server_only=server_only)
    follow = settings.children  # (server_only: each Python process starts a control server of its own)
    if follow:  # the program's Python processes record themselves (``processes``)
        child_env[FOLLOW_VAR] = spec.followed().to_env()
    if not _same_interpreter(argv[0]) or follow and not hook_installed():
        # the fallback, for an interpreter without this stepscope and its start-up hook installed (another
        # interpreter or virtual environment; stepscope run from a source tree on PYTHONPATH): make this stepscope
        # importable by it (the collect side is stdlib-only) and, with ``follow``, add a ``sitecustomize`` that does
        # the hook's work (``processes.at_startup``). Otherwise the installed hook (``processes.startup_hook``)
        # follows the processes and PYTHONPATH is left as it is. The folder is kept in the store: a followed process
        # may outlive the program (``processes.path_folder``)
        folder = path_folder(Path(store.path).resolve(), follow)
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, child_env.get("PYTHONPATH")]))
    relay = _Relay(drain_s=_drain_s(settings.profiles_hz))
    oom_kills = oom_kill_count()
    child_env[ENV_VAR] = dataclasses.replace(spec, signal_fd=relay.child_fd).to_env()
    try:
        proc = subprocess.Popen(argv, env=child_env, pass_fds=(relay.child_fd,), preexec_fn=relay.in_child)
    except OSError as e:
        relay.close()
        store.update_run(run_id, status="error", exit_code=127, error=f"cannot start {argv[0]}: {e.strerror}")
        raise CommandError(f"cannot start {argv[0]}: {e.strerror}") from None
    returncode = relay.wait(proc, _server_watch(proc.pid, on_server) if server_only and on_server else None)
    if server_only:
        return Outcome("", returncode)
    if store.get_run(run_id, as_stored=True).status == "failed":  # no such script or module: launch said so
        store.delete_run(run_id)
        return Outcome("", returncode)
    return Outcome(run_id, returncode, _settle(store, run_id, returncode, oom_kills))


def _drain_s(hz: float) -> float:
    """How long (s) the relay may leave the child's wakeup pipe unread: a byte a handled signal, the sampler's two
    timers included (``hz`` each at most), within a quarter of Linux's 64 KiB pipe; at most 10 s (each wake-up of
    this process costs ~0.1-0.2 ms of CPU on a VM: once a second, a tenth of an idle server's budget)."""
    return max(0.5, min(10.0, 65536 / 4 / (2 * max(hz, 1.0))))


def _server_watch(pid: int, on_server):
    """A ``_Relay.wait`` ``ready`` check: calls ``on_server(info)`` once the server of ``pid`` is published;
    True once it has, or once the child said it is done starting one (``told``) and none was published
    (the child said why on its stderr)."""
    from .client import find_server

    def check(told: bool) -> bool:
        info = find_server(pid)
        if info is not None:
            on_server(info)
            return True
        return told

    return check


def oom_kill_count() -> int | None:
    """How many processes the kernel's OOM killer has killed in this process's cgroup and below
    (cgroup v2 ``memory.events``, ``oom_kill``); None where that cannot be read."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((ln[3:].strip() for ln in f if ln.startswith("0::")), None)
        if rel is None:
            return None
        with open(os.path.join("/sys/fs/cgroup", rel.lstrip("/"), "memory.events")) as f:
            for ln in f:
                k, _, v = ln.partition(" ")
                if k == "oom_kill":
                    return int(v)
    except (OSError, ValueError):
        pass
    return None


def _settle(store: Store, run_id: str, returncode: int, oom_kills: int | None = None) -> str | None:
    """Make the run's status agree with the process's real end (the child may have died unannounced).
    A child killed by SIGKILL reads "oom" when the cgroup's OOM-kill count rose meanwhile (``oom_kills``:
    the count before it started), else "killed" with "SIGKILL (out of memory?)": the kernel's OOM killer
    is the usual sender. Returns why that could not be written (a full disk), or None."""
    run = store.get_run(run_id, as_stored=True)
    fields: dict = {"exit_code": returncode if returncode >= 0 else 128 - returncode}
    if run.status == "running":
        if returncode == -signal.SIGKILL:
            after = oom_kill_count()
            if oom_kills is not None and after is not None and after > oom_kills:
                fields.update(status="oom", error="SIGKILL: killed by the kernel's OOM killer")
            else:
                fields.update(status="killed", error="SIGKILL (out of memory?)")
        elif returncode < 0:
            sig = -returncode
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
            fields.update(status=signal_status(sig), error=name)
        else:
            fields.update(status="ok" if returncode == 0 else "error",
                          error=None if returncode == 0 else f"exit status {returncode}")
        if run.end_ns is None:
            fields["end_ns"] = clock.now_ns()
    try:
        store.update_run(run_id, **fields)
        _settle_processes(store, run_id)
    except DbError as e:
        return write_error_text(e, store.path)
    return None


def _settle_processes(store: Store, run_id: str) -> None:
    """The job's process runs that are still "running" once the program has ended: one whose process is gone ended
    without writing its end (SIGKILL, or ``os._exit`` outside multiprocessing): "killed", ended at its last
    record; one still alive (a daemon the program left behind) stays "running"."""
    for run in store.process_runs(run_id):
        if run.status == "lost":  # (read "running" with its process gone)
            store.update_run(run.id, status="killed", error="ended without writing its end (SIGKILL or os._exit)",
                             end_ns=store.last_record_ns(run.id) or run.start_ns)


#: Signals passed on to the program when this process gets them.
RELAYED = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
                if hasattr(signal, n))
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent: the terminal's Ctrl-C, Ctrl-backslash, hangup (to its group)
_SI_USER = 0  # si_code of a signal sent by kill()
_PR_SET_PDEATHSIG = 1


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _proc_mask(pid: int, field: str) -> int | None:
    """A signal mask of ``/proc/PID/status`` (``SigCgt``: caught, ``ShdPnd``: pending), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return None


@dataclass(slots=True)
class SignalEvent:
    """A signal this process got, as ``_Relay`` follows it. ``signo``; ``t``: ``time.monotonic()`` s when it came
    (when it was forwarded, once it was); ``sender``: the sender's pid (``si_pid``); ``state``: "wait" (not known
    to have reached the child), "delivered" (the child got it too) or "forwarded" (sent on to the child);
    ``seen``: a byte of the child's wakeup pipe was matched to it."""

    signo: int
    t: float
    sender: int
    state: str = "wait"
    seen: bool = False


class Receipt(NamedTuple):
    """A signal the child's handlers reported (a byte of its wakeup pipe) not yet matched to a ``SignalEvent``:
    ``signo``, ``t`` (``time.monotonic()`` s when it was read)."""

    signo: int
    t: float


class _Relay:
    """Waits for the child while passing on the signals this process gets (see the module doc).

    A signal the child also got (from the terminal, from its own group, or sent to the whole group) is
    not passed on: it is sent by the kernel (``SI_KERNEL``), or sent by the child itself, or pending in
    the child, or one of the child's handlers reports it through the wakeup pipe within ``grace`` s.
    A signal the child does not catch is passed on at once (a second copy of a fatal or ignored signal
    changes nothing). Copies of a signal from the same sender within ``grace`` s count once (``timeout``
    signals its child, then its group). Limits: a program that replaces the wakeup fd (asyncio's
    ``add_signal_handler``) or catches a signal in C (``faulthandler.register``) may get a copy sent to the
    whole group twice; without ``sigtimedwait`` (not Linux) all but SIGINT/SIGQUIT are passed on.
    """

    def __init__(self, grace: float = 0.5, drain_s: float = 1.0) -> None:
        self.grace = grace
        self.drain_s = drain_s  # the longest wait between two reads of the child's wakeup pipe (``_drain_s``)
        self.read_fd, self.child_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.child_fd, False)  # signal.set_wakeup_fd wants a non-blocking fd
        self.events: list[SignalEvent] = []
        self.child_got: list[Receipt] = []  # the child's handlers' receipts not matched yet
        self.watch = set(RELAYED) | {signal.SIGCHLD}
        self.blocking = hasattr(signal, "sigtimedwait")
        self.parent = os.getpid()
        self.old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, self.watch) if self.blocking else None
        self._prctl = _prctl()

    def in_child(self) -> None:
        """After fork, before exec: the parent's signal mask back; die with the parent (Linux)."""
        if self.old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old_mask)
        if self._prctl is not None:
            self._prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != self.parent:  # the parent died before prctl
                os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        for fd in (self.read_fd, self.child_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.old_mask is not None:
            while signal.sigtimedwait(self.watch, 0) is not None:  # copies that came late: the child is gone
                pass
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old_mask)
            self.old_mask = None

    def wait(self, proc: subprocess.Popen, ready=None) -> int:
        """Wait for ``proc`` to end, relaying signals; its return code. ``ready(told)``: called when the child
        sends this process a SIGCHLD of its own (``told`` True: ``launch``'s "the control server started") and
        once a second meanwhile (False), until it returns True. Otherwise it wakes for a signal (SIGCHLD: the
        child ended) or every ``drain_s`` to read the child's wakeup pipe."""
        os.close(self.child_fd)
        self.child_fd = -1
        try:
            if not self.blocking:  # no siginfo: pass on all but the terminal's (they reach the group)
                return self._wait_plain(proc)
            while True:
                waiting = [e.t + self.grace for e in self.events if e.state == "wait"]
                timeout = max(0.0, min(waiting) - time.monotonic()) if waiting else 1.0 if ready else self.drain_s
                info = signal.sigtimedwait(self.watch, timeout)
                now = time.monotonic()
                if ready is not None and (info is None or info.si_signo == signal.SIGCHLD):
                    told = info is not None and info.si_code == _SI_USER and info.si_pid == proc.pid
                    if (told or info is None) and ready(told):
                        ready = None
                self._read_child(now)
                if info is not None and info.si_signo != signal.SIGCHLD:
                    self._received(proc, info.si_signo, info.si_code, info.si_pid, now)
                rc = proc.poll()
                if rc is not None:
                    return rc
                self._forward_due(proc, now)
        finally:
            self.close()

    def _wait_plain(self, proc: subprocess.Popen) -> int:
        def forward(signum, frame):
            proc.send_signal(signum)

        old = {s: signal.signal(s, forward) for s in RELAYED if s not in (signal.SIGINT, signal.SIGQUIT)}
        old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return proc.wait()
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _read_child(self, now: float) -> None:
        # drained whole: the sampler's timer signals (profiling.signals) write a byte each too, up to thousands
        # a second, and a full pipe would drop the receipt of a signal relayed here
        chunks = []
        while True:
            try:
                part = os.read(self.read_fd, 65536)
            except (BlockingIOError, InterruptedError):
                break
            if not part:
                break
            chunks.append(part)
        data = b"".join(chunks)
        for signo in data:
            if signo not in RELAYED:
                continue
            for e in self.events:
                if e.signo == signo and not e.seen and (e.state == "wait" or now - e.t <= self.grace):
                    e.seen = True
                    if e.state == "wait":
                        e.state = "delivered"
                    break
            else:
                self.child_got.append(Receipt(signo, now))

    def _received(self, proc: subprocess.Popen, signo: int, code: int, sender: int, now: float) -> None:
        if signo not in RELAYED:
            return
        self.events = [e for e in self.events if e.state == "wait" or now - e.t <= 2 * self.grace]
        self.child_got = [c for c in self.child_got if now - c.t <= self.grace]
        if any(e.signo == signo and e.sender == sender and now - e.t <= self.grace for e in self.events):
            return  # a copy from the same sender: one event
        event = SignalEvent(signo, now, sender)
        self.events.append(event)
        got = next((c for c in self.child_got if c.signo == signo), None)
        if got is not None:
            self.child_got.remove(got)
            event.state, event.seen = "delivered", True
        elif code == _SI_KERNEL or sender == proc.pid or (_proc_mask(proc.pid, "ShdPnd") or 0) >> (signo - 1) & 1:
            event.state = "delivered"
        else:
            caught = _proc_mask(proc.pid, "SigCgt")
            if caught is not None and not caught >> (signo - 1) & 1:
                self._forward(proc, event, now)

    def _forward_due(self, proc: subprocess.Popen, now: float) -> None:
        for e in self.events:
            if e.state == "wait" and now - e.t >= self.grace:
                self._forward(proc, e, now)

    @staticmethod
    def _forward(proc: subprocess.Popen, event: SignalEvent, now: float) -> None:
        event.t, event.state = now, "forwarded"
        try:
            proc.send_signal(event.signo)
        except OSError:
            pass


def die_like(returncode: int) -> None:
    """End this process as the program ended when a signal killed it (``returncode`` < 0), so that a
    shell or supervisor sees the same death (no core file); returns otherwise."""
    if returncode >= 0:
        return
    sig = -returncode
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except (ImportError, ValueError, OSError):
        pass
    try:
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
