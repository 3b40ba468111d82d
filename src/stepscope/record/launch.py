"""Entry point inside the profiled program: ``python -m stepscope.record.launch (SCRIPT | -m MODULE | -c CODE) ARGS``.

``stepscope run`` starts the user's interpreter with this module and the run's settings in the
``STEPSCOPE_LAUNCH`` environment variable (``launchspec.LaunchSpec``: the settings, the run, the command...). It starts a session, runs the
program as Python would (``__main__``, ``sys.argv``, ``sys.path[0]``), and records how it ended. The
program sees the same results, exceptions, output and exit code as without stepscope: an uncaught
exception is printed by ``sys.excepthook`` with stepscope's frames removed, then the process exits 1;
KeyboardInterrupt ends it by SIGINT as Python does; SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 (those the
program left at their default) write the run, then end the process by the same signal. Under ``stepscope
run``, the signal wakeup fd is a pipe to it (``signal_fd``): it learns which signals reached the program's
handlers, so that it passes on only those the program did not get. Stdlib only.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import types

from .launchspec import ENV_VAR, LaunchSpec


def _hidden_files() -> frozenset:
    from .sampling.sampler import HIDDEN_FILES

    return HIDDEN_FILES


def _strip(tb, _seen=None):
    """The traceback without stepscope's frames (launcher, runpy, span wrappers): what Python would print
    without stepscope. Chained exceptions (``__cause__``/``__context__``) are cleaned too."""
    hidden = _hidden_files()
    head = prev = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename not in hidden:
            if prev is None:
                head = tb
            else:
                prev.tb_next = tb
            prev = tb
        tb = tb.tb_next
    if prev is not None:
        prev.tb_next = None
    return head


def _clean(exc: BaseException) -> None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = _strip(exc.__traceback__)
        for other in (exc.__cause__, exc.__context__):
            if other is not None and id(other) not in seen:
                other.__traceback__ = _strip(other.__traceback__)
        exc = exc.__context__


def _report_signals(fd: int) -> None:
    """Python writes one byte per signal its handlers receive to the wakeup fd: make it the pipe to
    ``stepscope run`` (its own, not inherited by the program's subprocesses; forked children drop it)."""
    try:
        os.set_inheritable(fd, False)
        signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
    except (OSError, ValueError):
        return

    def in_forked_child() -> None:
        try:
            old = signal.set_wakeup_fd(-1)
            if old != fd:
                signal.set_wakeup_fd(old)
            os.close(fd)
        except (OSError, ValueError):
            pass

    os.register_at_fork(after_in_child=in_forked_child)


def missing_target(kind: str, target: str) -> tuple[str, int] | None:
    """Python's own one-line error and exit code for a script that cannot be opened or a module that
    cannot be found (looked up without importing anything), or None."""
    if kind == "script" and not os.path.isdir(target):
        try:
            open(target, "rb").close()
        except OSError as e:
            prog = (getattr(sys, "orig_argv", None) or [sys.executable])[0]
            path = os.path.abspath(target) if sys.version_info >= (3, 10) else target
            return f"{prog}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}", 2
    elif kind == "module":
        import importlib.util

        if target.startswith("."):
            return f"{sys.executable}: Relative module names not supported", 1
        top = target.partition(".")[0]
        try:
            found = top in sys.modules or importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            return None  # let the program's own run say it
        if not found:
            if "." not in target:
                return f"{sys.executable}: No module named {target}", 1
            msg = f"Error while finding module specification for {target!r} (ModuleNotFoundError: No module named {top!r})"
            if target.endswith(".py"):
                msg += f". Try using '{target[:-3]}' instead of '{target}' as the module name."
            return f"{sys.executable}: {msg}", 1
    return None


def _check_target(kind: str, target: str, spec: LaunchSpec) -> None:
    """A program that cannot start ends as Python would end it (its one line, its exit code), and its run
    is marked "failed" for ``stepscope run`` to drop."""
    missing = missing_target(kind, target)
    if missing is None:
        return
    message, code = missing
    print(message, file=sys.stderr)
    if spec.run_id and not spec.server_only:
        try:
            from ..store.db import Store

            st = Store(spec.settings.store)
            st.update_run(spec.run_id, status="failed", exit_code=code, error=message)
            st.close()
        except Exception:
            pass
    sys.exit(code)


def _is_oom(e: BaseException) -> bool:
    from .memory.history import is_oom

    try:
        return is_oom(e)
    except Exception:
        return False


def _usage() -> None:
    print("usage: python -m stepscope.record.launch (SCRIPT | -m MODULE | -c CODE) [ARGS...]", file=sys.stderr)
    sys.exit(2)


def split_argv(argv: list[str]) -> tuple[str, str, list[str]]:
    """``SCRIPT ARGS | -m MODULE ARGS | -c CODE ARGS`` -> (kind: "script", "module" or "code", target, args);
    an empty argv prints the usage line and exits 2."""
    if not argv:
        _usage()
    if argv[0] == "-m" and len(argv) >= 2:
        return "module", argv[1], argv[2:]
    if argv[0] == "-c" and len(argv) >= 2:
        return "code", argv[1], argv[2:]
    return "script", argv[0], argv[1:]


def main() -> None:
    from . import api

    spec = LaunchSpec.from_env(os.environ.pop(ENV_VAR, None))
    if spec.signal_fd is not None:
        _report_signals(spec.signal_fd)
    kind, target, rest = split_argv(sys.argv[1:])

    settings = spec.settings
    _check_target(kind, target, spec)
    traces_main = any(n.startswith("__main__.") for n in settings.functions_to_trace + settings.step_functions)
    # the program's __main__, as the interpreter makes it, in place before the patcher looks at it
    main_mod = fresh_main(kind, target)
    name = settings.transaction or (target if kind != "code" else "-c")
    settings = dataclasses.replace(settings, transaction=name)
    if spec.server_only:  # record nothing; `stepscope capture` records windows on demand
        from .control import start_server

        start_server(store=settings.store)
        if spec.signal_fd is not None:  # `stepscope run` waits to say the server is ready (runner._server_watch)
            try:
                os.kill(os.getppid(), signal.SIGCHLD)
            except OSError:
                pass
        if settings.sampler != "thread":  # capture windows start in the server's thread: handlers set here
            from .sampling import signals

            signals.install()
        session = _NoSession()
    else:
        run_id = spec.run_id
        if spec.parent_run:  # a process that the program started (``processes``): a process run of its own
            run_id = _process_run(spec, settings)
        from .parts import follow_forks_with
        from .processes import follow_fork

        follow_forks_with(follow_fork)  # (a forked child records itself: ``processes.follow_fork``)
        # (its parts: the device trace, collectives, the end signals, forks followed... ``parts``, origin "run")
        session = api.start(settings, run_id=run_id, command=list(spec.command or sys.argv),
                            _owns_run=not run_id, _origin="run")
        session.top_run = spec.parent_run or session.run_id

    try:
        run_main(kind, target, rest, main_mod, session if traces_main and hasattr(session, "patcher") else None)
    except SystemExit as e:
        code = e.code
        ok = code is None or code == 0
        session.set_outcome("ok" if ok else "error", 0 if code is None else code if isinstance(code, int) else 1,
                            None if ok else f"SystemExit({code!r})")
        raise
    except KeyboardInterrupt as e:
        session.set_outcome("interrupted", -signal.SIGINT, "KeyboardInterrupt")
        _clean(e)
        sys.excepthook(type(e), e, e.__traceback__)
        session.finish()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException as e:
        t = type(e)
        oom = _is_oom(e)
        if oom and hasattr(session, "note_oom"):  # memory now, and CUDA's allocator snapshot (--memory-history)
            try:
                session.note_oom(e)
            except Exception:
                pass
        session.set_outcome("oom" if oom else "error", 1,
                            t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}")
        _clean(e)
        sys.excepthook(t, e, e.__traceback__)
        sys.exit(1)
    else:
        session.set_outcome("ok", 0)


def _process_run(spec: LaunchSpec, settings) -> str | None:
    """Create the run of this process of a job (``spec``: ``parent_run``, ``command``, ``process``: set by
    ``processes.at_startup``); its id, or None when the store cannot be written (the process then records a run
    of its own, as ``stepscope.init`` would)."""
    from ..core import clock
    from ..core.model import Run
    from .session import new_run_id
    from ..store.db import Store

    run_id = new_run_id()
    anchor = clock.Anchor.take()
    try:
        st = Store(settings.store)
        try:
            st.create_run(Run(id=run_id, command=list(spec.command or sys.argv), cwd=os.getcwd(),
                              host=spec.process.get("host", ""), pid=os.getpid(), start_ns=anchor.mono_ns,
                              anchor_mono_ns=anchor.mono_ns, anchor_wall_ns=anchor.wall_ns,
                              settings=settings.to_dict(), parent_run=spec.parent_run,
                              process=dict(spec.process)), anchor.wall_ns)
        finally:
            st.close()
    except Exception:
        return None
    return run_id


class _NoSession:
    """Stands in for the session when the program runs with only the control server."""

    def set_outcome(self, *args) -> None:
        pass

    def finish(self) -> None:
        pass


def fresh_main(kind: str, target: str) -> types.ModuleType:
    """A new ``__main__`` module with the namespace CPython gives a program (same names, same order:
    ``__name__ __doc__ __package__ __loader__ __spec__ __annotations__ __builtins__`` and, for a script,
    an absolute ``__file__``, ``__cached__``), registered in ``sys.modules``."""
    import builtins
    import importlib.machinery

    mod = types.ModuleType("__main__")
    d = mod.__dict__
    if kind == "script":
        path = os.path.abspath(target)
        d["__loader__"] = importlib.machinery.SourceFileLoader("__main__", path)
    elif kind == "code":
        d["__loader__"] = importlib.machinery.BuiltinImporter
    d["__annotations__"] = {}
    d["__builtins__"] = builtins
    if kind == "script":
        d["__file__"] = path
        d["__cached__"] = None
    sys.modules["__main__"] = mod
    return mod


def run_main(kind: str, target: str, rest: list, main_mod, session) -> None:
    """Run the program in ``main_mod`` as ``python SCRIPT | -m MODULE | -c CODE`` would; ``session``
    (when the program's own ``__main__`` functions are traced) compiles it with their probes."""
    compile_main = session.patcher.compile_main if session is not None else None
    if kind == "module":
        import runpy

        sys.argv = [target, *rest]
        try:
            mod_name, spec, code = runpy._get_module_details(target)
        except runpy._Error as exc:
            sys.exit(f"{sys.executable}: {exc}")
        if compile_main is not None:
            source = spec.loader.get_source(mod_name) if hasattr(spec.loader, "get_source") else None
            if source is not None:
                code = compile_main(source, code.co_filename)
        sys.argv[0] = spec.origin
        runpy._run_code(code, main_mod.__dict__, None, "__main__", spec)
    elif kind == "code":
        sys.argv = ["-c", *rest]
        sys.path[0] = ""
        code = compile_main(target, "<string>") if compile_main else compile(target, "<string>", "exec",
                                                                              dont_inherit=True)
        if sys.version_info >= (3, 13):  # 3.13+ keeps the -c source for tracebacks' lines, under "<string>"
            import linecache

            linecache.cache["<string>"] = (len(target), None, [ln + "\n" for ln in target.splitlines()], "<string>")
        exec(code, main_mod.__dict__)
    else:
        sys.argv = [target, *rest]
        path = os.path.abspath(target)
        sys.path[0] = os.path.dirname(os.path.realpath(target))
        if os.path.isdir(path) or not path.endswith((".py", ".pyw")) and _is_zip(path):
            import runpy

            runpy.run_path(target, run_name="__main__")
            return
        with open(path, "rb") as f:
            source = f.read()
        code = compile_main(source, path) if compile_main else compile(source, path, "exec", dont_inherit=True)
        exec(code, main_mod.__dict__)


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False


if __name__ == "__main__":
    main()
