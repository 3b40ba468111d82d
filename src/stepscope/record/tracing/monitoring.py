"""The Python 3.12+ tracing mechanism: PEP 669 ``sys.monitoring`` events on the traced code objects.

Nothing of the program is replaced: stepscope takes a free tool id and turns on ``PY_START``,
``PY_RESUME``, ``PY_RETURN`` and ``PY_YIELD`` for the traced code objects only (local events), plus the
global ``PY_UNWIND`` and ``PY_THROW`` (CPython offers them only globally; the callbacks return at once for
other code). Callbacks run with events off, so the program's own ``sys.settrace``/``sys.setprofile``/
``cProfile`` (another tool id) never see them. Each callback hands over to the code's ``Probe``.

A code object shared by several functions (closures made by one factory) is traced for all of them.
Code that torch.compile runs as a compiled graph emits no events: the Dynamo bytecode hook notes those
(see ``tracing.probes.compiled``).

With the C recorder (``stepscope.record.native``) the callbacks registered are its C functions: a plain traced
code object (``recorder.takes``) is recorded there with only ``PY_START`` and ``PY_RETURN`` on, a generator,
coroutine or async generator with its yields and resumptions too; the calls of the other traced code objects
are handed on to the Python callbacks below.
"""

from __future__ import annotations

import sys

from threading import get_ident
from time import perf_counter_ns

from .. import native
from ..spans import buffer
from ..spans.record import REC_PROBE
from . import recorder
from .probes import Probe, forget_frame

_getframe = sys._getframe


class Monitor:
    """One ``sys.monitoring`` tool for stepscope's probes. Raises RuntimeError when no tool id is free.
    ``every_call``: every start and return goes through the probe's ``enter``/``exit`` (its subclass's:
    ``probes.TrackingProbe``), none through the inlined common case."""

    def __init__(self, every_call: bool = False) -> None:
        mon = sys.monitoring
        self._mon = mon
        ev = mon.events
        self._local = ev.PY_START | ev.PY_RESUME | ev.PY_RETURN | ev.PY_YIELD
        for tool in (4, 3, 5, 1):
            if mon.get_tool(tool) is None:
                mon.use_tool_id(tool, "stepscope")
                break
        else:
            raise RuntimeError("no sys.monitoring tool id is free (ids 1, 3, 4, 5 are all taken)")
        self.tool = tool
        self.probes: dict = {}  # code -> Probe
        self._by_id: dict = {}  # id(code) -> Probe: a code object's hash is computed anew on every call
        probes = self._by_id
        DISABLE = mon.DISABLE
        get, set_, next_id, append = buffer.current_span.get, buffer.current_span.set, buffer.next_span_id, \
            buffer.finished.append
        parent = buffer.parent_of
        #: the C recorder's module when it takes the plain code objects (not with ``every_call``)
        self.ext = native.ext if not every_call else None
        self._plain = ev.PY_START | ev.PY_RETURN

        def on_start(code, offset):
            p = probes.get(id(code))
            if p is None:
                return DISABLE
            if p.hooks is None and p.by_class is None:  # Probe.enter's common case, inlined (hot path)
                if p.generator:
                    forget_frame(_getframe(1))
                prev = get()
                set_([next_id(), perf_counter_ns(), parent(prev), p, None, p.name, None, prev])
            else:
                p.enter(_getframe(1))

        def on_resume(code, offset):
            p = probes.get(id(code))
            if p is None:
                return DISABLE
            p.resume(None, id(_getframe(1)))

        def on_return(code, offset, retval):
            p = probes.get(id(code))
            if p is None:
                return DISABLE
            if p.generator or p.hooks is not None:
                p.exit(id(_getframe(1)) if p.generator else None)
                return
            end = perf_counter_ns()  # Probe.exit's common case, inlined (hot path)
            rec = get()
            if rec is not None and rec[REC_PROBE] is p:
                sid, start, parent, _, attrs, name, error, restore = rec  # (record.FIELDS: one unpack, the fastest)
                if sid is not None:
                    append((sid, parent, name, p.op, start, end, get_ident(), error, attrs))
                set_(restore)

        if every_call:  # (the probes keep count of the calls open: no inlined case)
            def on_start(code, offset):
                p = probes.get(id(code))
                if p is None:
                    return DISABLE
                p.enter(_getframe(1))

            def on_return(code, offset, retval):
                p = probes.get(id(code))
                if p is None:
                    return DISABLE
                p.exit(id(_getframe(1)) if p.generator else None)

        def on_yield(code, offset, retval):
            p = probes.get(id(code))
            if p is None:
                return DISABLE
            p.suspend(None, id(_getframe(1)))

        def on_throw(code, offset, exc):
            p = probes.get(id(code))
            if p is not None:
                p.resume(None, id(_getframe(1)))

        def on_unwind(code, offset, exc):
            p = probes.get(id(code))
            if p is not None:
                fid = id(_getframe(1)) if p.generator else None
                p.error(type(exc), fid)
                p.exit(fid)

        def on_line(code, line):  # the step loops' lines only (``steps.hooks.LoopScope``)
            p = probes.get(id(code))
            h = p.loop if p is not None else None
            if h is None:
                return DISABLE
            spec = h.loop
            try:
                if spec.head <= line < spec.first:  # (a head over several lines: its iterator's lines too)
                    h.head()
                elif line == spec.first:
                    h.begin(True)
                elif spec.first < line <= spec.last:
                    return DISABLE  # (inside the loop: not an event it needs)
                else:
                    h.end()
            except Exception:  # a hook must never break the program
                pass

        reg = mon.register_callback
        ext = self.ext
        reg(tool, ev.LINE, on_line)
        if ext is not None:  # the C functions are the callbacks; they hand Python probes' calls to these
            ext.set_forward(on_start, on_resume, on_return, on_yield, on_throw, on_unwind)
            on_start, on_resume, on_return, on_yield, on_throw, on_unwind = (
                ext.mon_start, ext.mon_resume, ext.mon_return, ext.mon_yield, ext.mon_throw, ext.mon_unwind)
        reg(tool, ev.PY_START, on_start)
        reg(tool, ev.PY_RESUME, on_resume)
        reg(tool, ev.PY_RETURN, on_return)
        reg(tool, ev.PY_YIELD, on_yield)
        reg(tool, ev.PY_THROW, on_throw)
        reg(tool, ev.PY_UNWIND, on_unwind)
        mon.set_events(tool, ev.PY_UNWIND | ev.PY_THROW)

    def add(self, code, probe: Probe) -> None:
        """Trace ``code`` with ``probe`` (again after the probe changed: a subclass filter added)."""
        self.probes[code] = probe
        self._by_id[id(code)] = probe
        events = self._local
        if self.ext is not None:
            if recorder.native_kind(probe, generators=True):  # all its calls, or a denoiser's nested ones
                self.ext.mark(code, 2 + recorder.register(probe))
                if not probe.generator:
                    events = self._plain
            else:
                self.ext.mark(code, 1)
        if probe.loop is not None:  # its step loop's iterations: LINE events of this code
            events |= self._mon.events.LINE
        self._mon.set_local_events(self.tool, code, events)
        self._mon.restart_events()

    def remove(self, code) -> None:
        """Stop tracing ``code`` (calls in flight end without a span)."""
        if self.probes.pop(code, None) is not None:
            self._by_id.pop(id(code), None)
            if self.ext is not None:
                self.ext.mark(code, 0)
            try:
                self._mon.set_local_events(self.tool, code, 0)
            except ValueError:
                pass

    def close(self) -> None:
        """Stop every event and give the tool id back."""
        mon = self._mon
        for code in list(self.probes):
            self.remove(code)
        mon.set_events(self.tool, 0)
        for event in (mon.events.PY_START, mon.events.PY_RESUME, mon.events.PY_RETURN, mon.events.PY_YIELD,
                      mon.events.PY_THROW, mon.events.PY_UNWIND, mon.events.LINE):
            mon.register_callback(self.tool, event, None)
        mon.free_tool_id(self.tool)
