"""How a traced function gets its probes, behind one small interface.

- ``monitoring`` (Python 3.12+, the default there): PEP 669 ``sys.monitoring`` local events on the
  traced code objects (``tracing.monitoring``). Nothing of the program changes.
- ``code`` (Python 3.11, the default there): the function's ``__code__`` is replaced by the same code
  with probe calls (``tracing.codeswap``). The function object, frames and line events stay.

``STEPSCOPE_TRACING=code`` picks the 3.11 mechanism on 3.12+ too (for tests and benchmarks).

Both hand the plain traced functions to the C recorder when it is in use (``tracing.recorder`` chooses).
"""

from __future__ import annotations

import os
import sys
import types

from . import codeswap, probes, recorder
from .. import native
from .codeswap import CannotInstrument
from .probes import Probe

__all__ = ["CannotInstrument", "Mechanism", "choose"]


class Mechanism:
    """Puts probes on functions and takes them off. ``name``: "monitoring" or "code"."""

    name = "?"

    def trace(self, fn: types.FunctionType, probe: Probe) -> None:
        """Trace every call of ``fn`` with ``probe``. Raises CannotInstrument."""
        raise NotImplementedError

    def untrace(self, fn: types.FunctionType) -> None:
        """Undo ``trace`` (calls in flight finish without a span)."""
        raise NotImplementedError

    def retrace(self, fn: types.FunctionType, probe: Probe) -> None:
        """``probe`` of the traced ``fn`` changed (a subclass filter added): its calls go to the recorder that
        fits it now. Raises CannotInstrument."""
        raise NotImplementedError

    def compile_main(self, source: str, filename: str, defs: dict[str, Probe]):
        """The script's module code (``compile`` with ``dont_inherit``), with the functions whose
        qualname is in ``defs`` traced by their probe. Raises SyntaxError as ``compile`` does."""
        raise NotImplementedError

    def close(self) -> None:
        """Undo everything."""


#: The instrumented code of each function whose calls went to the C recorder, kept from session to session in this
#: process: its code before -> [the instrumented code, the C probe that is its constant, the probe id its
#: compile-time branch notes, in use]. A later session that traces the same function takes it again, its C probe
#: rebound to the new session's code index (and Python probe), instead of compiling the source again: the
#: interpreter's specialisation of the code (3.11 quickens a code object after its first calls, and until then runs
#: every instruction unspecialised: global and attribute loads by dict lookups) is kept as the untraced code's is,
#: and a session's start skips the parse and two compiles per function. Only C probes are kept: their code depends on
#: the function alone (no subclass filter, hooks or step loop, which the Python probe's code may carry).
_KEPT: dict = {}


class CodeMechanism(Mechanism):
    name = "code"

    def __init__(self) -> None:
        codeswap.install_builtins()
        self._original: dict = {}  # fn -> its code before

    def trace(self, fn, probe):
        first = probe.first_arg if probe.by_class is not None else None
        native_probe(probe)
        code = fn.__code__
        new = _take_kept(code, probe)
        if new is None:
            new = codeswap.instrument_function(fn, probe, first)
            if probe.native is not None and code not in _KEPT:
                _KEPT[code] = [new, probe.native, probe.id, True]
        self._original.setdefault(fn, code)
        fn.__code__ = new

    def retrace(self, fn, probe):
        if probe.native is not None and recorder.native_kind(probe) != probe.native_kind:
            self.untrace(fn)
            self.trace(fn, probe)

    def untrace(self, fn):
        code = self._original.pop(fn, None)
        if code is not None:
            try:
                fn.__code__ = code
            except (AttributeError, TypeError, ValueError):
                pass
            kept = _KEPT.get(code)
            if kept is not None and kept[3]:
                kept[3] = False
                probes.unalias(kept[2])

    def compile_main(self, source, filename, defs):
        for p in defs.values():
            native_probe(p)
        return codeswap.instrument_module(source, filename, {q: (p, None) for q, p in defs.items()})

    def close(self):
        for fn in list(self._original):
            self.untrace(fn)


class MonitoringMechanism(Mechanism):
    name = "monitoring"

    def __init__(self, every_call: bool = False) -> None:
        from .monitoring import Monitor

        self._monitor = Monitor(every_call)
        self._traced: dict = {}  # fn -> code

    def trace(self, fn, probe):
        code = fn.__code__
        self._monitor.add(code, probe)
        self._traced[fn] = code

    def retrace(self, fn, probe):
        code = self._traced.get(fn)
        if code is not None:
            self._monitor.add(code, probe)

    def untrace(self, fn):
        code = self._traced.pop(fn, None)
        if code is not None and code not in self._traced.values():
            self._monitor.remove(code)

    def compile_main(self, source, filename, defs):
        code = compile(source, filename, "exec", dont_inherit=True)
        todo = [code]
        while todo:
            c = todo.pop()
            for k in c.co_consts:
                if isinstance(k, types.CodeType):
                    p = defs.get(k.co_qualname)
                    if p is not None:
                        p.code = k
                        self._monitor.add(k, p)
                    todo.append(k)
        return code

    def close(self):
        self._monitor.close()
        self._traced.clear()


def _take_kept(code, probe: Probe):
    """The kept instrumented code of ``code`` (``_KEPT``) for ``probe``, its C probe rebound to ``probe``'s code
    index (``probe.native`` then is that C probe), or None: nothing kept, kept code in use by another function of the
    same code, or a C probe of another kind."""
    kept = _KEPT.get(code)
    fresh = probe.native
    if kept is None or kept[3] or fresh is None or type(kept[1]) is not type(fresh):
        return None
    c = kept[1]
    if probe.native_kind == "nested":
        c.__init__(fresh.index, probe)
    else:
        c.__init__(fresh.index)
    probe.native = c
    probes.alias(kept[2], probe)
    kept[3] = True
    return kept[0]


def native_probe(probe: Probe) -> None:
    """Set ``probe.native``: the C recorder's ``Probe`` that the 3.11 instrumented code calls in its place, when
    the C recorder takes it (``recorder.takes``), its ``DenoiserProbe`` when it takes the nested calls
    (``recorder.takes_nested``: the others go to ``probe``), else None; ``probe.native_kind`` says which."""
    kind = probe.native_kind = recorder.native_kind(probe)
    if kind == "all":
        probe.native = native.ext.Probe(recorder.register(probe))
    elif kind == "nested":
        probe.native = native.ext.DenoiserProbe(recorder.register(probe), probe)
    else:
        probe.native = None


def choose(every_call: bool = False) -> Mechanism:
    """The mechanism for this interpreter (see the module docstring). ``every_call``: the probes' own
    ``enter``/``exit`` run for every call (``probes.TrackingProbe``: a session that cuts the spans still
    open at its end)."""
    want = os.environ.get("STEPSCOPE_TRACING", "")
    if want != "code" and hasattr(sys, "monitoring"):
        try:
            return MonitoringMechanism(every_call)
        except RuntimeError:
            pass
    return CodeMechanism()
