"""stepscope: trace, sample and explain the performance of ML pipelines you did not write.

Public API (Sentry SDK shaped)::

    import stepscope
    stepscope.init(functions_to_trace=["pkg.mod.Class.method"], profiles_hz=101)
    with stepscope.transaction("txt2img", op="function"):
        with stepscope.span("vae decode"):
            ...

    with stepscope.profile(trace=["pkg.mod.Class.method"]) as run:   # a block as a run, looked at from Python
        ...
    run.explain(); run.diff(earlier); run.report("r.html"); run.steps

In IPython/Jupyter: ``%load_ext stepscope``, then ``%%stepscope [--trace NAME]`` on a cell.

    @stepscope.trace
    def f(): ...

Importing stepscope only defines names: it imports neither torch nor diffusers, loads the recording side on first
use of the API, and starts nothing (no thread, no server). ``STEPSCOPE_SERVER=1`` starts the control server at the
interpreter's start-up instead (``stepscope.record.processes.startup_hook``, run by ``stepscope-follow.pth``).
"""

__version__ = "0.1.0"
__all__ = ["init", "shutdown", "transaction", "span", "trace", "current_session", "start_server", "profile",
           "load_ipython_extension", "__version__"]


def start_server(store: str | None = None, host: str = "127.0.0.1", port: int = 0):
    """Let ``stepscope capture --pid`` record windows of this process on demand (idle: one blocked
    thread, nothing patched, no sampler). Binds 127.0.0.1 and a free port by default; the port and a
    token are published in a file only this user can read. Returns the server, or None when it cannot
    start (no private runtime folder: one line on stderr says why; the program goes on)."""
    from .record.control import start_server as _start

    return _start(store, host, port)


_API = frozenset({"current_session", "init", "shutdown", "span", "trace", "transaction"})


def load_ipython_extension(ipython) -> None:
    """``%load_ext stepscope`` in IPython/Jupyter: the ``%%stepscope`` cell magic and ``%stepscope_diff``
    (``stepscope.notebook.magics``)."""
    from .notebook.magics import load_ipython_extension as _load

    _load(ipython)


def __getattr__(name: str):
    """The API is imported on first use (PEP 562): a CLI command such as ``stepscope device`` never loads the
    recording side."""
    if name in _API or name == "api":
        import importlib

        api = importlib.import_module(".record.api", __name__)
        return api if name == "api" else getattr(api, name)
    if name == "profile":  # ``with stepscope.profile(trace=[...]) as run:`` (``notebook.handle``)
        from .notebook.handle import profile

        return profile
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API | {"profile"})

