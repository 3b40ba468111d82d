"""stepscope: trace, sample and explain the performance of ML pipelines you did not write.

Public API (Sentry SDK shaped)::

    import stepscope
    stepscope.init(functions_to_trace=["pkg.mod.Class.method"], profiles_hz=101)
    with stepscope.transaction("txt2img", op="function"):
        with stepscope.span("vae decode"):
            ...

    @stepscope.trace
    def f(): ...

Importing stepscope imports neither torch nor diffusers.
"""

from .api import current_session, init, shutdown, span, trace, transaction

__version__ = "0.1.0"
__all__ = ["init", "shutdown", "transaction", "span", "trace", "current_session", "__version__"]
