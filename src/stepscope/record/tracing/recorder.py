"""Which recorder records a traced code object's calls: the C one (``stepscope.record.native``, issue 31) or the
Python probe (``tracing.probes``).

The C recorder takes the plain traced functions (no hooks, no subclass filter, not a generator, coroutine or
async generator): their start and end push and pop a per-thread stack in C and write a fixed-size record into
preallocated columns, no Python object per call, the clock read once per event. On Python 3.12+ its functions
are the ``sys.monitoring`` callbacks themselves (``tracing.monitoring``), on 3.11 the instrumented code calls
a ``_native.Probe`` (``tracing.codeswap``, ``mechanism.native_probe``). On 3.12+ it also takes generators,
coroutines and async generators without hooks or subclass filter: their records are the Python probe's (a list
made current in the ContextVar, so that they nest per asyncio task; parked by frame while suspended), made and
ended in C, each finished one a record in the columns. A denoiser's ``forward`` (``takes_nested``) has its nested
calls recorded in C with their step and its outermost ones on its Python probe. Every other traced code object
(step-level spans that read memory or frames, subclass-filtered methods, on 3.11 generators and coroutines) and
every call of a capture window (``probes.TrackingProbe``) stays on the Python probe.

Without the extension (``stepscope.record.native.ext`` None: ``STEPSCOPE_RECORDER=python``, not built, or not
loadable) every probe stays on Python and nothing here is called but the predicates, which then say False.
"""

from __future__ import annotations

from .. import native
from ..steps.hooks import StepScoped
from .probes import Probe


def takes(probe: Probe, generators: bool = False) -> bool:
    """True when all of ``probe``'s calls can go to the C recorder (see the module docstring). ``generators``: the
    mechanism hands the C recorder the yield and resume events too (``sys.monitoring``, 3.12+), so generators,
    coroutines and async generators qualify."""
    return (native.ext is not None and type(probe) is Probe and probe.hooks is None and probe.by_class is None
            and (generators or not probe.generator) and probe.name is not None)


def takes_nested(probe: Probe) -> bool:
    """True when the C recorder takes ``probe``'s nested calls: the probe of a denoiser's ``forward``
    (``steps.StepScoped`` hooks, no device mirror, no subclass filter, not a generator). A call inside an open
    denoiser call (a UNet's blocks, the transformers in them) is recorded in C with that call's step (the
    span's ``diffusion.step`` and ``diffusion.nested``), as the probe would tag it, without its Python hooks
    (~5 us a call on 3.11); any other call (the outermost denoiser: its step counted, its memory read) goes to
    the probe."""
    return (native.ext is not None and type(probe) is Probe and probe.hooks.__class__ is StepScoped
            and probe.by_class is None and not probe.generator and probe.name is not None)


def native_kind(probe: Probe, generators: bool = False) -> str | None:
    """How the C recorder takes ``probe``: "all" its calls (``takes``), "nested" ones (``takes_nested``), or
    None (all on the Python probe)."""
    return "all" if takes(probe, generators) else "nested" if takes_nested(probe) else None


def register(probe: Probe) -> int:
    """A new code index of the C recorder for ``probe``'s span name and op, of the kind ``probe`` needs: plain,
    generator (recorded as the Python probe's records, with ``probe`` in them) or denoiser (``takes_nested``).
    Only for a probe that ``native_kind`` takes (AttributeError without the extension)."""
    return native.ext.register(probe.name, probe.op, probe, 2 if takes_nested(probe) else 1 if probe.generator else 0)


def outer_in_c(on: bool = True) -> bool:
    """Have the C recorder take the outermost calls of denoisers' ``forward`` too (``_native.outer_setup``,
    record/native/outer.c: the records their Python probe made, made in C, ~half its cost a denoising step), or not
    (``on`` False: all on the Python probe). Done once at import; returns whether it is on (False without the
    extension, or on an interpreter whose running frame it cannot read: then every such call is the Python probe's)."""
    ext = native.ext
    if ext is None or not hasattr(ext, "outer_setup") or not hasattr(ext, "frame_args"):
        return False
    if not on:
        ext.outer_setup(None)
        return False
    from ..memory.history import PAGE
    from ..spans import buffer
    from ..steps import hooks, workfacts
    from . import probes

    ext.outer_setup(vars(probes), hooks._scope, buffer.finished, workfacts._denoisers, workfacts._MAX_DENOISERS,
                    hooks._start_listeners, hooks._DENOISER_MODULES, PAGE)
    return True


OUTER_IN_C = outer_in_c()
