"""Entry point inside the profiled program: ``python -m stepscope.launch (SCRIPT | -m MODULE | -c CODE) ARGS``.

``stepscope run`` starts the user's interpreter with this module and the run's settings in the
``STEPSCOPE_LAUNCH`` environment variable (JSON: ``run_id``, ``settings``). It starts a session, runs the
program as Python would (``__main__``, ``sys.argv``, ``sys.path[0]``), and records how it ended. The
program sees the same results, exceptions, output and exit code as without stepscope: an uncaught
exception is printed by ``sys.excepthook`` with stepscope's frames removed, then the process exits 1;
KeyboardInterrupt ends it by SIGINT as Python does; SIGTERM (if the program set no handler) writes the
run, then ends the process by SIGTERM. Stdlib only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import runpy
import signal
import sys
import types

ENV_VAR = "STEPSCOPE_LAUNCH"


def _hidden_files() -> frozenset:
    from .profiling.sampler import HIDDEN_FILES

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


def _usage() -> None:
    print("usage: python -m stepscope.launch (SCRIPT | -m MODULE | -c CODE) [ARGS...]", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    from . import api
    from .settings import Settings

    raw = os.environ.pop(ENV_VAR, None)
    cfg = json.loads(raw) if raw else {}
    argv = sys.argv[1:]
    if not argv:
        _usage()
    if argv[0] == "-m" and len(argv) >= 2:
        kind, target, rest = "module", argv[1], argv[2:]
    elif argv[0] == "-c" and len(argv) >= 2:
        kind, target, rest = "code", argv[1], argv[2:]
    else:
        kind, target, rest = "script", argv[0], argv[1:]

    settings = Settings.from_dict(cfg.get("settings", {}))
    traces_main = any(n.startswith("__main__.") for n in settings.functions_to_trace)
    # the program's __main__, as the interpreter makes it, in place before the patcher looks at it
    main_mod = _fresh_main(kind, target)
    name = settings.transaction or (target if kind != "code" else "-c")
    settings = dataclasses.replace(settings, transaction=name)
    if cfg.get("server_only"):  # record nothing; `stepscope capture` records windows on demand
        from .control.server import start_server

        start_server(store=settings.store)
        session = _NoSession()
    else:
        session = api.start(settings, run_id=cfg.get("run_id"), command=cfg.get("command") or sys.argv,
                            _owns_run=not cfg.get("run_id"))

    if not cfg.get("server_only"):
        if settings.device_trace:
            _start_device_capture(session, settings)
        if settings.compile_report:
            _start_compile_report(session)

    if not cfg.get("server_only") and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def on_term(signum, frame):
            session.flush_on_signal("terminated", -signal.SIGTERM)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_term)

    try:
        _run(kind, target, rest, main_mod, session if traces_main and hasattr(session, "patcher") else None)
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
        session.set_outcome("error", 1, t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}")
        _clean(e)
        sys.excepthook(t, e, e.__traceback__)
        sys.exit(1)
    else:
        session.set_outcome("ok", 0)


class _NoSession:
    """Stands in for the session when the program runs with only the control server."""

    def set_outcome(self, *args) -> None:
        pass

    def finish(self) -> None:
        pass


def _start_device_capture(session, settings) -> None:
    """Start the torch profiler for the run; a missing torch is one line on stderr, not a failure."""
    try:
        from .device.capture import DeviceCapture

        cap = DeviceCapture(session.store.run_dir(session.run_id) / "device_trace.json.gz",
                            with_stack=settings.device_stacks, steps=settings.device_steps)
        cap.start()
    except ImportError as e:
        print(f"stepscope: --device-trace needs torch ({e}); recording without the device timeline", file=sys.stderr)
        return
    session.on_finish(cap.stop)


def _start_compile_report(session) -> None:
    try:
        from .device.compile_report import CompileRecorder

        rec = CompileRecorder()
        rec.start()
    except ImportError as e:
        print(f"stepscope: --compile-report needs torch ({e}); recording without it", file=sys.stderr)
        return
    path = session.store.run_dir(session.run_id) / "compile_report.json"
    session.on_finish(lambda: rec.stop(path))


def _fresh_main(kind: str, target: str) -> types.ModuleType:
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


def _run(kind: str, target: str, rest: list, main_mod, session) -> None:
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
