"""How a traced function gets its probes, behind one small interface.

- ``monitoring`` (Python 3.12+, the default there): PEP 669 ``sys.monitoring`` local events on the
  traced code objects (``tracing.monitoring``). Nothing of the program changes.
- ``code`` (Python 3.11, the default there): the function's ``__code__`` is replaced by the same code
  with probe calls (``tracing.codeswap``). The function object, frames and line events stay.

``STEPSCOPE_TRACING=code`` picks the 3.11 mechanism on 3.12+ too (for tests and benchmarks).
"""

from __future__ import annotations

import os
import sys
import types

from . import codeswap
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

    def compile_main(self, source: str, filename: str, defs: dict[str, Probe]):
        """The script's module code (``compile`` with ``dont_inherit``), with the functions whose
        qualname is in ``defs`` traced by their probe. Raises SyntaxError as ``compile`` does."""
        raise NotImplementedError

    def close(self) -> None:
        """Undo everything."""


class CodeMechanism(Mechanism):
    name = "code"

    def __init__(self) -> None:
        codeswap.install_builtins()
        self._original: dict = {}  # fn -> its code before

    def trace(self, fn, probe):
        first = probe.first_arg if probe.by_class is not None else None
        new = codeswap.instrument_function(fn, probe, first)
        self._original.setdefault(fn, fn.__code__)
        fn.__code__ = new

    def untrace(self, fn):
        code = self._original.pop(fn, None)
        if code is not None:
            try:
                fn.__code__ = code
            except (AttributeError, TypeError, ValueError):
                pass

    def compile_main(self, source, filename, defs):
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
