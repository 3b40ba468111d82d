"""Processes as ``stepscope capture`` sees them (Linux ``/proc``): a process's command line, its parent and
descendants, and the program's own command when it runs under stepscope's launcher.

A program started by ``stepscope run`` runs as ``python -m stepscope.record.launch (SCRIPT | -m MODULE | -c CODE)
ARGS``: ``app_command`` takes the launcher out again, so that messages and runs name the program
(``python -m nodeapp.main PORTFILE``), and ``app_label`` gives the words a user knows it by
(``nodeapp.main PORTFILE``). Stdlib only: the control server uses it inside the program.
"""

from __future__ import annotations

import os

LAUNCHER = "stepscope.record.launch"
# interpreter options that take a value (python --help)
_OPTS_WITH_VALUE = {"-W", "-X", "-Q", "--check-hash-based-pycs"}


def cmdline(pid: int) -> list[str] | None:
    """The command line of process ``pid`` (``/proc/PID/cmdline``); None when it is gone or unreadable,
    [] for a kernel thread or a zombie."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] if raw else []


def parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (``/proc/PID/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rpartition(b")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie not reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def is_descendant(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is among the parents of ``pid`` (up to init)."""
    seen = 0
    p = parent(pid)
    while p and seen < 4096:
        if p == ancestor:
            return True
        p = parent(p)
        seen += 1
    return False


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, nearest first (one pass over ``/proc``'s parent links)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            pp = parent(int(name))
            if pp is not None:
                children.setdefault(pp, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        nxt = []
        for p in todo:
            for c in sorted(children.get(p, ())):
                if c not in out:
                    out.append(c)
                    nxt.append(c)
        todo = nxt
    return out


def is_python(argv: list[str] | None) -> bool:
    """Whether a command line runs a Python interpreter."""
    if not argv:
        return False
    name = os.path.basename(argv[0])
    return name.startswith(("python", "pypy")) or name == "py"


def _program_start(argv: list[str]) -> int:
    """Index of the program's first word (SCRIPT, ``-m``, ``-c``) in a Python command line."""
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-m", "-c") or not a.startswith("-") or a == "-":
            return i
        i += 2 if a in _OPTS_WITH_VALUE else 1
    return i


def runs_launcher(argv: list[str] | None) -> bool:
    """Whether a command line runs a program under stepscope's launcher (``python -m stepscope.record.launch ...``)."""
    if not is_python(argv):
        return False
    i = _program_start(argv)
    return argv[i:i + 2] == ["-m", LAUNCHER]


def app_command(argv: list[str]) -> list[str]:
    """The program's own command line: ``argv`` without stepscope's launcher (``python -m stepscope.record.launch
    app.py ARGS`` -> ``python app.py ARGS``; a launcher path first, as the launcher's ``sys.argv`` is,
    is dropped too); any other command as it is."""
    argv = list(argv)
    if argv and os.path.basename(argv[0]) == "launch.py" and os.path.basename(os.path.dirname(argv[0])) == "stepscope":
        return argv[1:]
    if is_python(argv):
        i = _program_start(argv)
        if argv[i:i + 2] == ["-m", LAUNCHER]:
            return argv[:i] + argv[i + 2:]
    return argv


def app_label(argv: list[str] | None, width: int = 80) -> str:
    """The words a user knows a program by: its script or module and arguments (``nodeapp.main PORTFILE``,
    ``app.py --port 80``, ``-c CODE``), the interpreter and stepscope's launcher left out; at most ``width``
    characters (the arguments cut first, ``…`` at the end; the script or module kept whole)."""
    words = app_command(argv or [])
    if is_python(words):
        words = words[_program_start(words):]
    if words[:1] == ["-m"]:
        words = words[1:]
    text = " ".join(words) or "?"
    if len(text) <= width:
        return text
    head = " ".join(words[:2]) if words[:1] == ["-c"] else words[0]
    return head if len(head) >= width - 1 else text[: width - 1] + "…"


def label_of(pid: int, width: int = 80) -> str:
    """``app_label`` of process ``pid``'s command line (``pid N`` when it cannot be read)."""
    argv = cmdline(pid)
    return app_label(argv, width) if argv else f"pid {pid}"


#: environment variables of the torch.distributed launchers (torchrun / elastic, accelerate, DeepSpeed) -> fact name
RANK_VARS = {"RANK": "rank", "LOCAL_RANK": "local_rank", "WORLD_SIZE": "world_size", "GROUP_RANK": "group_rank",
             "LOCAL_WORLD_SIZE": "local_world_size", "ROLE_NAME": "role", "TORCHELASTIC_RESTART_COUNT": "restart",
             "TORCHELASTIC_RUN_ID": "job"}


def run_facts(how: str) -> dict:
    """This process's facts for its run (``Run.process``): ``ppid``, ``how`` it started (``exec``: a new interpreter;
    ``fork``), ``host``, and the torch.distributed launcher's ``rank``, ``local_rank``, ``world_size``... (ints where
    they are numbers) when the environment has them."""
    import socket

    out: dict = {"ppid": os.getppid(), "how": how, "host": socket.gethostname()}
    for var, key in RANK_VARS.items():
        v = os.environ.get(var)
        if v is not None:
            try:
                out[key] = int(v)
            except ValueError:
                out[key] = v
    return out
