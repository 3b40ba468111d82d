"""Every Python process of a job in one run: what a process started under ``stepscope run`` does to be recorded.

``stepscope run`` records the program it starts, and (unless ``--no-children``) every Python process that program
starts, directly or further down, each as a *process run* (``Run.parent_run``: the top run's id) that the store's
reader joins to the top run (``store.reader.load_run``):

- **A new interpreter** (``subprocess`` of ``python``, multiprocessing's spawn and forkserver, torchrun's and
  ``accelerate launch``'s workers, a shell script that runs ``python``): stepscope's start-up hook, ``HOOK_PTH``,
  installed with it into site-packages (setup.py), calls ``startup_hook`` at the start of every interpreter of that
  environment that has ``FOLLOW_VAR`` (set by the runner); it replaces the process (``os.execv``, same pid, same
  descriptors, same interpreter options) by ``python [options] -m stepscope.record.launch`` with the program's own script,
  ``-m`` module or ``-c`` code and arguments (``sys.orig_argv``), in child mode: the launcher creates the process
  run and records it as it records the top program. ``PYTHONPATH`` and ``sys.path`` are left as they are. Where the
  program's interpreter has not this stepscope installed with its hook (another interpreter or virtual environment,
  a source tree on ``PYTHONPATH``), the fallback: the runner puts a folder on ``PYTHONPATH`` (``path_folder``) with a
  link to this package and a ``sitecustomize.py`` that calls ``at_startup`` (the same, then the program's own
  ``sitecustomize``, the next one on ``sys.path``). Either way, an interpreter started with ``-E``, ``-I`` or ``-S``
  is not followed; neither is an interactive one (no script, ``-`` or ``-i``).
- **A forked child** (multiprocessing's fork, DataLoader workers, ``os.fork``): the parent's recording is undone in
  the child (``Session.after_fork_in_child``), then ``follow_fork`` starts a session of a new process run with the
  same settings. It finishes at the child's exit (``atexit``) or, in a multiprocessing process (which leaves by
  ``os._exit``), at its ``multiprocessing.util`` exit finalizers.

Each process run carries ``process`` facts (``facts``): the parent's pid, how it started (``exec``/``fork``) and, in
a torch.distributed launcher's worker, ``rank``, ``local_rank``, ``world_size``, ``group_rank``, ``role`` from the
environment that torchrun, ``accelerate launch`` and DeepSpeed set. The clock is the same monotonic clock in every
process of the host (``time.perf_counter_ns``: CLOCK_MONOTONIC), so spans and samples of every process are on the
run's clock as recorded; each process still takes its own wall-clock anchor (``clock.Anchor``).

The program sees one environment variable of stepscope's, ``FOLLOW_VAR`` (its own children need it to be followed in
turn), and, in the fallback only, the ``PYTHONPATH`` entry. Stdlib only: runs inside any interpreter.

The same start-up hook serves ``SERVER_VAR``: an interpreter started with ``STEPSCOPE_SERVER=1`` starts the control
server (``control.start_server``) before its program runs, so that ``stepscope capture --pid`` can attach to a program
that never imports stepscope (importing ``stepscope`` itself starts nothing).
"""

from __future__ import annotations

import os
import sys

# ``FOLLOW_VAR``: the environment variable that makes a Python process started below ``stepscope run`` record itself
# (``launchspec.FollowSpec``); ``LAUNCH_VAR``: the launcher's (``launchspec.LaunchSpec``): a process that has it is
# being launched already
from ..core.procs import run_facts
from .launchspec import ENV_VAR as LAUNCH_VAR, FOLLOW_VAR, FollowSpec
#: the environment variable that starts the control server in an interpreter at its start (value ``1``)
SERVER_VAR = "STEPSCOPE_SERVER"

#: the start-up hook installed with stepscope into site-packages (setup.py; its source: src/stepscope-follow.pth):
#: with ``FOLLOW_VAR`` or ``SERVER_VAR`` set it calls ``startup_hook``, else it costs two ``in os.environ`` tests
HOOK_PTH = "stepscope-follow.pth"
#: interpreter options that take a value (python --help)
OPTS_WITH_VALUE = frozenset({"-W", "-X", "-Q", "--check-hash-based-pycs"})

SITECUSTOMIZE = '''\
# stepscope: records this Python process as part of the run that started it (stepscope.record.processes)
def _stepscope_start():
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from stepscope.record.processes import at_startup
    except Exception:
        return
    at_startup(here)


_stepscope_start()
del _stepscope_start
'''


#: the store's folder (``<store>/path/``) of the folders that ``stepscope run`` puts on ``PYTHONPATH``
PATH_DIR = "path"


def path_folder(store_dir, follow: bool) -> str:
    """The folder that ``stepscope run`` puts on ``PYTHONPATH`` for an interpreter that does not have this stepscope
    installed: a link to this package (``stepscope``) and, with ``follow``, ``SITECUSTOMIZE``. Made once per package
    path and content in the store (``<store>/path/<key>``, made whole by a rename) and kept: a followed process can
    outlive the program (multiprocessing's resource tracker, a daemon) and import stepscope, or start a Python
    process of its own, long after ``stepscope run`` has ended (a temporary folder removed at the program's end
    broke their imports: issue 39)."""
    import hashlib
    import shutil
    import tempfile

    pkg = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the stepscope package
    text = SITECUSTOMIZE if follow else ""
    key = hashlib.sha256(f"{pkg}\0{text}".encode()).hexdigest()[:16]
    root = os.path.join(os.fspath(store_dir), PATH_DIR)
    folder = os.path.join(root, key)
    if os.path.isdir(folder):
        return folder
    os.makedirs(root, exist_ok=True)
    new = tempfile.mkdtemp(prefix=".new-", dir=root)
    try:
        os.symlink(pkg, os.path.join(new, "stepscope"))
        if follow:
            with open(os.path.join(new, "sitecustomize.py"), "w") as f:
                f.write(text)
        os.rename(new, folder)
    except OSError:
        shutil.rmtree(new, ignore_errors=True)
        if not os.path.isdir(folder):  # (else another run made it meanwhile)
            raise
    return folder


def split_command(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """``[python, *options, PROGRAM...]`` -> ``(options, program)`` where ``program`` is ``[SCRIPT, *args]``,
    ``["-m", MOD, *args]`` or ``["-c", CODE, *args]``; None when there is no program to run (an interactive
    interpreter, a script read from stdin: ``-``) or the argv is malformed. Interpreter options are as
    ``python --help`` lists them (``-W``/``-X`` take a value)."""
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-m", "-c"):
            return (argv[1:i], argv[i:]) if i + 1 < len(argv) else None
        if a in OPTS_WITH_VALUE:
            i += 2
            continue
        if a.startswith("-") and a != "-":
            if a[1:2] != "-" and len(a) > 2 and a[-1] in "mc" and set(a[1:-1]) <= set("bBdEhiIOqsSuvxR"):
                return (argv[1:i] + [a[:-1]], ["-" + a[-1], *argv[i + 1:]]) if i + 1 < len(argv) else None
            i += 1
            continue
        return None if a == "-" else (argv[1:i], argv[i:])
    return None


def _chain(own_dir: str) -> None:
    """Run the ``sitecustomize`` that ours hides (the next one on ``sys.path``), as ``site`` would have."""
    import importlib.machinery
    import importlib.util

    own = os.path.realpath(own_dir)
    path = [p for p in sys.path if os.path.realpath(p or ".") != own]
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    except (ImportError, ValueError):
        return
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    spec.loader.exec_module(mod)


def _exec_launcher() -> None:
    """With ``FOLLOW_VAR`` set (and no launch under way), replace this process by the launcher running the same
    program (``sys.orig_argv``: same pid, descriptors and interpreter options) as a process of the run; returns only
    when that is not to be done or cannot be (the program then runs as it would)."""
    raw = os.environ.get(FOLLOW_VAR)
    if raw and LAUNCH_VAR not in os.environ and not sys.flags.interactive:
        form = split_command(list(getattr(sys, "orig_argv", []) or []))
        if form is not None:
            try:
                options, program = form
                # (`stepscope run --server`: a control server here too, nothing recorded: ``FollowSpec.launch``)
                os.environ[LAUNCH_VAR] = FollowSpec.from_env(raw).launch(list(sys.orig_argv), run_facts("exec")).to_env()
                sys.stdout.flush()
                sys.stderr.flush()
                os.execv(sys.executable, [sys.orig_argv[0], *options, "-m", "stepscope.record.launch", *program])
            except Exception:
                os.environ.pop(LAUNCH_VAR, None)  # not followed: the program runs as it would


def _server_from_env() -> None:
    """With ``SERVER_VAR`` set to ``1``: start this process's control server (``stepscope.start_server()``: once;
    when it cannot start, one line on stderr and the program goes on)."""
    if os.environ.get(SERVER_VAR) == "1":
        from .control import start_server

        start_server()


def startup_hook() -> None:
    """Run by ``HOOK_PTH`` (installed with stepscope into site-packages) at the start of every interpreter of the
    environment that has ``FOLLOW_VAR`` or ``SERVER_VAR`` set: with ``FOLLOW_VAR``, replace this process by the
    launcher running the same program as a process of the run (``_exec_launcher``; the new interpreter runs this hook
    again); with ``SERVER_VAR=1``, start the control server (``_server_from_env``). Like the fallback
    (``at_startup``, which needs ``PYTHONPATH``), it leaves an interpreter started with ``-E`` or ``-I`` alone.
    Never raises."""
    try:
        if not (sys.flags.ignore_environment or sys.flags.isolated):
            _exec_launcher()
            _server_from_env()
    except Exception:
        pass


def hook_installed() -> bool:
    """Whether this interpreter runs ``HOOK_PTH`` at its start: the file is in one of its site-packages folders (the
    user's one where enabled). ``stepscope run`` then follows the program's processes by ``FOLLOW_VAR`` alone."""
    import site

    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return any(os.path.isfile(os.path.join(d, HOOK_PTH)) for d in dirs)


def at_startup(own_dir: str) -> None:
    """Called by the ``sitecustomize.py`` in ``own_dir`` (the fallback folder on ``PYTHONPATH``, ``path_folder``) at
    the interpreter's start: with ``FOLLOW_VAR`` set (and no launch under way), replace this process by the launcher
    running the same program as a process of the run; otherwise (or when that cannot be done) start the control
    server when ``SERVER_VAR`` asks (as ``startup_hook``), run the program's own ``sitecustomize`` and return."""
    _exec_launcher()
    try:
        _server_from_env()
    except Exception:
        pass
    _chain(own_dir)


def follow_fork(parent) -> None:
    """In a forked child of a recorded process (after ``parent.after_fork_in_child`` undid its recording): record
    this process as a process run of the same job with ``parent``'s settings (its parts as ``parts`` gives them to
    origin "fork": the end signals and forks followed, no device trace). Never raises."""
    try:
        from . import api
        from ..core import clock
        from ..core.model import Run
        from .session import Session, new_run_id

        top = parent.top_run
        settings = parent.settings
        run_id = new_run_id()
        anchor = clock.Anchor.take()
        session = Session(settings, run_id=run_id, command=list(parent.command), owns_run=False, origin="fork")
        session.top_run = top
        from ..store.db import Store

        st = Store(settings.store)
        st.create_run(Run(id=run_id, command=list(parent.command), pid=os.getpid(), start_ns=anchor.mono_ns,
                          anchor_mono_ns=anchor.mono_ns, anchor_wall_ns=anchor.wall_ns, settings=settings.to_dict(),
                          parent_run=top, process=run_facts("fork")), anchor.wall_ns)
        st.close()
        api.adopt(session.start())  # (its end signals: a pool's terminate() is a SIGTERM, the run is written first)
        _finish_multiprocessing(session)
    except Exception:
        pass


def _finish_multiprocessing(session) -> None:
    """A multiprocessing process leaves by ``os._exit`` (no ``atexit``): finish ``session`` at its exit finalizers
    (registered once the process has run multiprocessing's after-fork hooks, which clear the finalizers)."""
    util = sys.modules.get("multiprocessing.util")
    if util is None:
        return

    def arm(s) -> None:
        util.Finalize(s, s.finish, exitpriority=-(2 ** 30))

    util.register_after_fork(session, arm)
