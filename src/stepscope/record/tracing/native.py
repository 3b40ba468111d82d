"""Which recorder records the traced calls: the C one (``stepscope.record._native``, issue 31) or the pure-Python one.

The C recorder takes the plain traced functions (no hooks, no subclass filter, not a generator, coroutine or
async generator): their start and end push and pop a per-thread stack in C and write a fixed-size record into
preallocated columns, no Python object per call, the clock read once per event. On Python 3.12+ its functions
are the ``sys.monitoring`` callbacks themselves (``tracing.monitoring``), on 3.11 the instrumented code calls
a ``_native.Probe`` (``tracing.codeswap``). On 3.12+ it also takes generators, coroutines and async generators
without hooks or subclass filter: their records are the Python probe's (a list made current in the ContextVar,
so that they nest per asyncio task; parked by frame while suspended), made and ended in C, each finished one a
record in the columns. A denoiser's ``forward`` (``takes_nested``) has its nested calls recorded in C with
their step and its outermost ones on its Python probe. Every other traced code object (step-level spans that
read memory or frames, subclass-filtered methods, on 3.11 generators and coroutines) and every call of a
capture window (``probes.TrackingProbe``) stays on the Python probe (``tracing.probes``).

The pure-Python recorder is used when ``STEPSCOPE_RECORDER=python``, on an interpreter the extension was
not built for, or when it cannot load (``load_error`` then holds the one line; the session notes it in the
run, never on the program's stderr). ``RECORDER`` names the one in use ("native" or "python"); it is decided
once, when this module is imported.
"""

from __future__ import annotations

import os

#: the ``stepscope.record._native`` module when the C recorder is in use, else None
ext = None
#: why the C recorder could not load (one line), or None
load_error: str | None = None

if os.environ.get("STEPSCOPE_RECORDER", "").strip().lower() != "python":
    try:
        from .. import _native as ext
    except ModuleNotFoundError as e:  # not built here (no compiler, or this interpreter's .so missing)
        if e.name != "stepscope.record._native":
            load_error = f"native recorder: cannot load stepscope.record._native: {e}"
    except Exception as e:  # a .so built for another ABI, a missing symbol...
        load_error = f"native recorder: cannot load stepscope.record._native: {type(e).__name__}: {e}"

#: "native" or "python"
RECORDER = "native" if ext is not None else "python"


def takes(probe, generators: bool = False) -> bool:
    """True when ``probe``'s calls can go to the C recorder (see the module docstring). ``generators``: the
    mechanism hands the C recorder the yield and resume events too (``sys.monitoring``, 3.12+), so generators,
    coroutines and async generators qualify."""
    from .probes import Probe

    return (ext is not None and type(probe) is Probe and probe.hooks is None and probe.by_class is None
            and (generators or not probe.generator) and probe.name is not None)


def takes_nested(probe) -> bool:
    """True when the C recorder takes ``probe``'s nested calls: the probe of a denoiser's ``forward``
    (``steps.StepScoped`` hooks, no device mirror, no subclass filter, not a generator). A call inside an open
    denoiser call (a UNet's blocks, the transformers in them) is recorded in C with that call's step (the
    span's ``diffusion.step`` and ``diffusion.nested``), as the probe would tag it, without its Python hooks
    (~5 us a call on 3.11); any other call (the outermost denoiser: its step counted, its memory read) goes to
    the probe."""
    from .probes import Probe
    from ..steps.hooks import StepScoped

    return (ext is not None and type(probe) is Probe and probe.hooks.__class__ is StepScoped
            and probe.by_class is None and not probe.generator and probe.name is not None)


def register(probe) -> int:
    """A code index of the C recorder for ``probe``'s span name and op (a generator's: recorded as the Python
    probe's records, with ``probe`` in them; a denoiser's: ``takes_nested``)."""
    return ext.register(probe.name, probe.op, probe, 2 if takes_nested(probe) else 1 if probe.generator else 0)


def native_kind(probe, generators: bool = False) -> str | None:
    """How the C recorder takes ``probe``: "all" its calls (``takes``), "nested" ones (``takes_nested``), or
    None."""
    return "all" if takes(probe, generators) else "nested" if takes_nested(probe) else None
