"""Span probes: what runs when a traced function starts, suspends, resumes and ends.

A ``Probe`` belongs to one traced code object. The tracing mechanism (``tracing.mechanism``: PEP 669
``sys.monitoring`` on Python 3.12+, instrumented code objects on 3.11) calls it; nothing is wrapped, so
the program keeps its function objects, frames and recursion depth.

The open span lives in the ``buffer.current_span`` ContextVar as an open-span record, a list whose fields
are named in ``spans.record`` (``REC_ID`` .. ``REC_RESTORE``; ``restore``: the value to put back when the span
ends or its generator suspends). Calls nest per thread and per asyncio task because the ContextVar does.
A generator or coroutine frame that suspends puts its caller's value back and keeps its own record in
``_suspended`` (keyed by the frame's id, so no frame is kept alive) until it resumes.

Finished spans are appended to ``buffer.finished`` in the layout of ``buffer.SPAN_FIELDS``; times are
``perf_counter_ns`` readings (ns). Per call: two clock reads, two ContextVar sets, one list and one tuple. With the
C recorder in use (``stepscope.record.native``; ``tracing.recorder`` chooses) the plain traced functions (on 3.12+
also generators and coroutines without hooks or subclass filter: the same records, made in C) never reach a
``Probe``: their calls are recorded in C; a span opened here takes the C recorder's innermost open call as its
parent when that opened later (``buffer.parent_of``).

Calls inside a region compiled by ``torch.compile`` run as part of the compiled graph and cannot be
timed on their own: ``compiled(probe_id)`` is called by Dynamo while it traces them (3.11 mechanism) or
from its bytecode hook (3.12+), and ``compiled_notes()`` tells which traced names ran compiled, inside
which span.
"""

from __future__ import annotations

import sys
import threading
from threading import get_ident
from time import perf_counter_ns

from .. import native
from ..spans import buffer
from ..steps.hooks import LoopScope, StepScoped, open_step_of
from ...core.steprules import NESTED_ATTR, STEP_ATTR, WAIT_IN
from ..spans.labels import NAME_KEY
from ..spans.record import REC_ATTRS, REC_ERROR, REC_ID, REC_LEN, REC_NAME, REC_PROBE, REC_RESTORE, finished

_cv = buffer.current_span
_get = _cv.get
_set = _cv.set
_append = buffer.finished.append
_next_id = buffer.next_span_id
_parent = buffer.parent_of
error_name = buffer.error_name
_getframe = sys._getframe

#: id(frame) -> the open-span record of a suspended generator/coroutine frame
_suspended: dict[int, list] = {}
#: 3.13+: id(frame) -> [weak reference to its generator, last suspension ns, thread id] (``end_closed``)
_gens: dict[int, list] = {}
#: 3.13+, the C recorder's (record, note) pairs of such frames freed before ``end_closed`` saw them
_orphans: list = []
#: whether a frame can end with no event: 3.13's ``close()`` of a generator or coroutine suspended outside any
#: ``try`` block just completes its frame (CPython's ``gen_close`` fast path), as does freeing such a generator
SILENT_CLOSE = sys.version_info >= (3, 13)


def forget_frame(frame) -> None:
    """A generator or coroutine ``frame`` starts: a record parked under its address belongs to a frame that ended
    with no event and was freed (``SILENT_CLOSE``) before ``end_closed`` saw it: its span ends at its last
    suspension (before 3.13: dropped), so that this frame's calls do not end it."""
    rec = _suspended.pop(id(frame), None)
    if _gens:
        note = _gens.pop(id(frame), None)
        if rec is not None and note is not None:  # (the generator that ran there is gone: its span ends)
            _end_at(rec, note)


def _generator_of(frame):
    """The generator, coroutine or async generator object running ``frame`` (3.13: no Python attribute gives it;
    ``PyFrame_GetGenerator``), or None."""
    try:
        return _frame_get_generator(frame)
    except Exception:  # (NULL: not a generator's frame)
        return None


def _note_suspension(fid: int, frame) -> None:
    note = _gens.get(fid)
    if note is not None:
        note[1] = perf_counter_ns()
        note[2] = get_ident()
        return
    gen = _generator_of(frame)
    if gen is not None:
        try:
            _gens[fid] = [weakref.ref(gen), perf_counter_ns(), get_ident()]
        except TypeError:
            pass


def _ended(gen) -> bool:
    """Whether a generator/coroutine/async generator object is gone or its frame completed."""
    if gen is None:
        return True
    for attr in ("gi_frame", "cr_frame", "ag_frame"):
        if hasattr(gen, attr):
            return getattr(gen, attr) is None
    return False


def end_closed() -> int:
    """End the spans of generator and coroutine frames that ended with no event (``SILENT_CLOSE``) as if they
    returned at their last suspension (closing one runs none of its code); the records of both recorders
    (``_suspended`` and the C recorder's ``parked``). Called by ``buffer.take``; returns how many were ended."""
    n = 0
    if _orphans:
        while _orphans:
            n += _end_at(*_orphans.pop())
    for parked, notes in _tables:
        if not notes:
            continue
        for fid, note in list(notes.items()):
            if not _ended(note[0]()) or notes.get(fid) is not note:  # (not a new frame's at the same address)
                continue
            notes.pop(fid, None)
            n += _end_at(parked.pop(fid, None), note)
    return n


def _end_at(rec, note) -> int:
    """Finish a parked record at its note's last suspension (ns) on its thread; 1 if it was a span. ``note``: this
    module's ``[ref, ns, thread id]`` or the C recorder's ``(ref, bytearray)`` (native int64 ns, uint64 id)."""
    if rec is None or rec.__class__ is not list or len(rec) != REC_LEN or rec[REC_ID] is None:
        return 0
    end, tid = struct.unpack("=qQ", note[1]) if len(note) == 2 else note[1:3]
    _append(finished(rec, getattr(rec[REC_PROBE], "op", "function"), end, tid))
    return 1


if SILENT_CLOSE:
    import ctypes
    import struct
    import weakref

    _frame_get_generator = ctypes.pythonapi.PyFrame_GetGenerator
    _frame_get_generator.restype = ctypes.py_object
    _frame_get_generator.argtypes = [ctypes.py_object]
    _tables = [(_suspended, _gens)]
    if native.ext is not None and hasattr(native.ext, "parked_gen"):
        _tables.append((native.ext.parked, native.ext.parked_gen))
        _orphans = native.ext.orphans
    buffer.set_sweep(end_closed)


#: probe id -> Probe (the 3.11 mechanism's code refers to probes by id)
_registry: dict[int, "Probe"] = {}
_ids = iter(range(1, 1 << 62))
_lock = threading.Lock()

#: traced name -> enclosing span names (or "") seen while torch.compile traced it into a graph
_compiled: dict[str, set] = {}

#: ``memory.history.SpanMemory`` of the recording session (None: no memory figures at span entry/exit); set with
#: ``set_span_memory``. Only probes with hooks (step-level spans: pipeline calls, denoisers, scheduler steps) read it:
#: a few microseconds a span, too much for every traced call.
span_memory = None


def set_span_memory(memory) -> None:
    """Have the probes with hooks read ``memory`` (a ``memory.history.SpanMemory``: its ``read_in()`` at a span's
    entry, ``exit(attrs)`` at its end) from now on, in place of the one they read (one per process: the recording
    session's). None: no memory figures at span entry and exit."""
    global span_memory
    span_memory = memory


def release_span_memory(memory) -> None:
    """Stop reading ``memory`` if it is the one in use (a session that finishes, or whose forked child records
    nothing, drops its own and never a later session's)."""
    global span_memory
    if memory is not None and span_memory is memory:
        span_memory = None


class Probe:
    """The span logic for one traced code object.

    ``name``: the span name (``module.Qualname``); ``op``: the span op; ``hooks``: optional
    ``enter_frame(frame) -> attrs | None`` / ``exit()`` object (``steps.hooks``, ``tracing.mirror``);
    ``by_class``: for a method traced through a subclass (``pkg.Sub.step`` defined on ``Base``), a list of
    ``(class, span name)``: a call is traced only when its first argument is an instance (or subclass, for
    classmethods) of one of them, under that name; ``name`` is then the name for other calls, or None.
    ``generator``: the code is a generator, coroutine or async generator (it suspends). ``native``: the C
    recorder's probe that the 3.11 instrumented code calls instead (``mechanism.native_probe``), or None;
    ``native_kind``: "all", "nested" (a denoiser's: ``recorder.takes_nested``) or None.
    """

    __slots__ = ("id", "name", "op", "hooks", "by_class", "generator", "code", "first_arg", "native", "native_kind",
                 "loop", "__weakref__")

    def __init__(self, name: str | None, op: str = "function", hooks=None, by_class=None, generator: bool = False,
                 code=None) -> None:
        with _lock:
            self.id = next(_ids)
            _registry[self.id] = self
        self.name = name
        self.op = getattr(hooks, "op", op)
        self.hooks = hooks
        self.by_class = list(by_class) if by_class else None
        self.generator = generator
        self.code = code
        self.first_arg = code.co_varnames[0] if code is not None and code.co_argcount else None
        self.native = None
        self.native_kind = None
        #: the ``steps.hooks.LoopScope`` among the hooks (a step loop's iterations), or None
        self.loop = hooks if hooks.__class__ is LoopScope else getattr(hooks, "inner", None) \
            if getattr(hooks, "inner", None).__class__ is LoopScope else None

    def forget(self) -> None:
        """Drop the probe from the registry (after its code is restored)."""
        _registry.pop(self.id, None)

    # -- start / end -------------------------------------------------------------------------------
    def enter(self, frame=None) -> None:
        """The traced function starts. ``frame``: its frame (default: the caller's, as when the
        instrumented code calls this itself)."""
        prev = _get()
        hooks = self.hooks
        name = self.name
        if self.generator and _suspended:
            forget_frame(frame if frame is not None else _getframe(1))
        if hooks is None and self.by_class is None:  # the common case, kept short
            _set([_next_id(), perf_counter_ns(), _parent(prev), self, None, name, None, prev])
            return
        if hooks.__class__ is StepScoped and self.by_class is None and prev is not None:
            step = open_step_of(prev)
            if step is not None:  # a denoiser inside a traced denoiser's call (a UNet's blocks): its step, no readings
                _set([_next_id(), perf_counter_ns(), _parent(prev), self, {STEP_ATTR: step, NESTED_ATTR: True}, name,
                      None, prev])
                return
        if self.by_class is not None:
            name = self._name_for(frame if frame is not None else _getframe(1))
            if name is None:  # a call this probe does not trace: a marker so that exit pairs up
                _set([None, 0, None, self, None, None, None, prev])
                return
        mem = _memory_in() if span_memory is not None and hooks is not None and not _in_measured(prev) else None
        attrs = _hook_attrs(hooks, frame if frame is not None else _getframe(1)) if hooks is not None else None
        if attrs is not None and NAME_KEY in attrs:  # a label from the arguments (``tracing.labels``)
            name = attrs.pop(NAME_KEY)
            attrs = attrs or None
        if mem is not None:
            attrs = _memory_merge(attrs, mem)
        _set([_next_id(), perf_counter_ns(), _parent(prev), self, attrs, name, None, prev])

    def enter_as(self, first, frame=None) -> None:
        """``enter`` for a probe with ``by_class``, given the call's first argument (3.11 mechanism).
        ``frame``: the traced frame (default: the caller's)."""
        prev = _get()
        name = self._name_of(first)
        if name is None:
            _set([None, 0, None, self, None, None, None, prev])
            return
        mem = _memory_in() if span_memory is not None and self.hooks is not None and not _in_measured(prev) else None
        attrs = _hook_attrs(self.hooks, frame if frame is not None else _getframe(1)) if self.hooks is not None else None
        if attrs is not None and NAME_KEY in attrs:
            name = attrs.pop(NAME_KEY)
            attrs = attrs or None
        if mem is not None:
            attrs = _memory_merge(attrs, mem)
        _set([_next_id(), perf_counter_ns(), _parent(prev), self, attrs, name, None, prev])

    def error(self, exc_type: type | None = None, fid: int | None = None) -> None:
        """The call is ending by an exception (``sys.exc_info()`` when not given). ``fid``: id of the
        traced frame (default: the caller's)."""
        if self.loop is not None:
            t = exc_type if exc_type is not None else sys.exc_info()[0]
            self.loop.end(error_name(t) if t is not None else None)
        rec = self._record(fid if fid is not None or not self.generator else id(_getframe(1)), False)
        if rec is not None and rec[REC_ID] is not None:
            t = exc_type if exc_type is not None else sys.exc_info()[0]
            if t is not None and not issubclass(t, GeneratorExit):  # a closed generator ended normally
                rec[REC_ERROR] = error_name(t)

    def exit(self, fid: int | None = None) -> None:
        """The call ends (returned, raised, or its generator was exhausted or closed). ``fid``: id of
        the traced frame (default: the caller's; only generators need it)."""
        hooks = self.hooks
        if self.loop is not None:  # its open iteration ends first (it is the current record)
            self.loop.end()
        if span_memory is not None and hooks is not None:  # memory at exit, read before the end is taken
            r = _suspended.get(fid if fid is not None else id(_getframe(1))) if self.generator else None
            if r is None:
                r = _get()
            if (r is not None and r.__class__ is list and r[REC_PROBE] is self and r[REC_ID] is not None
                    and r[REC_ATTRS] is not None):
                a = r[REC_ATTRS]
                if "memory.rss_in" in a or "memory.cuda_in" in a or "_memory.cuda_hwm" in a or WAIT_IN in a:
                    _memory_out(a)
        end = perf_counter_ns()
        if self.generator:
            rec = self._record(fid if fid is not None else id(_getframe(1)))
            if rec is None:
                return
        else:
            rec = _get()
            if rec is None or rec.__class__ is not list or rec[REC_PROBE] is not self:
                return
        sid, start, parent, _, attrs, name, error, restore = rec  # (record.FIELDS: one unpack, the fastest)
        if sid is not None:
            _append((sid, parent, name, self.op, start, end, get_ident(), error, attrs))
        _set(restore)
        if hooks is not None and sid is not None and hooks.__class__ is not StepScoped:  # (its exit does nothing)
            try:
                hooks.exit()
            except Exception:
                pass

    def _record(self, fid, pop: bool = True):
        """The open record of frame ``fid``: the suspended one of this generator frame (removed when
        ``pop``), else the current one if it is this probe's."""
        if fid is not None:
            rec = _suspended.pop(fid, None) if pop else _suspended.get(fid)
            if rec is not None:
                return rec
        rec = _get()
        if rec is None or rec.__class__ is not list or rec[REC_PROBE] is not self:
            return None
        return rec

    # -- step loops (``steps.hooks.LoopScope``) ----------------------------------------------------------
    def loop_begin(self, after_head: bool = False) -> None:
        """An iteration of the step loop starts (3.11: called first in the loop's body)."""
        try:
            self.loop.begin(after_head)
        except Exception:  # a hook must never break the program
            pass

    def loop_end(self) -> None:
        """The step loop was left (3.11: called after the loop statement)."""
        try:
            self.loop.end()
        except Exception:
            pass

    # -- generators and coroutines -----------------------------------------------------------------
    def suspend(self, value=None, fid: int | None = None):
        """The frame is about to yield ``value``: give the caller its context back. Returns ``value``."""
        rec = _get()
        if rec is not None and rec.__class__ is list and rec[REC_PROBE] is self:
            if fid is None:
                fid = id(_getframe(1))
            _suspended[fid] = rec
            if SILENT_CLOSE:
                f = _getframe(1)
                while f is not None and id(f) != fid:  # (the monitoring callback's caller)
                    f = f.f_back
                if f is not None:
                    _note_suspension(fid, f)
            _set(rec[REC_RESTORE])
        return value

    def resume(self, value=None, fid: int | None = None):
        """The frame resumed (``value``: what was sent in): its span is current again. Returns ``value``."""
        rec = _suspended.pop(fid if fid is not None else id(_getframe(1)), None)
        if rec is not None:
            rec[REC_RESTORE] = _get()
            _set(rec)
        return value

    # -- subclass filter ---------------------------------------------------------------------------
    def _name_for(self, frame) -> str | None:
        if self.first_arg is None:
            return self.name
        try:
            first = frame.f_locals[self.first_arg]
        except Exception:
            return self.name
        return self._name_of(first)

    def _name_of(self, first) -> str | None:
        cls = first if isinstance(first, type) else type(first)
        for klass, name in self.by_class:
            try:
                if issubclass(cls, klass):
                    return name
            except TypeError:
                pass
        return self.name

    def __repr__(self) -> str:
        return f"<stepscope probe {self.name or self.by_class!r}>"


class TrackingProbe(Probe):
    """A ``Probe`` that also keeps the calls open now in ``live`` (span id -> ``(record, thread ident)``), so
    that the session can store the spans still running when it ends, cut at its end (a capture window:
    ``Session(cut_open=True)``). A dict insert and delete per call more than ``Probe``: only capture windows
    use it (the ``monitoring`` mechanism then sends every call through ``enter``/``exit``)."""

    __slots__ = ("live",)

    def __init__(self, *args, live: dict, **kw) -> None:
        super().__init__(*args, **kw)
        self.live = live

    def enter(self, frame=None) -> None:
        Probe.enter(self, frame if frame is not None else _getframe(1))
        rec = _get()
        if rec is not None and rec[REC_ID] is not None:
            self.live[rec[REC_ID]] = (rec, get_ident())

    def enter_as(self, first, frame=None) -> None:
        Probe.enter_as(self, first, frame if frame is not None else _getframe(1))
        rec = _get()
        if rec is not None and rec[REC_ID] is not None:
            self.live[rec[REC_ID]] = (rec, get_ident())

    def exit(self, fid: int | None = None) -> None:
        if self.generator:
            if fid is None:
                fid = id(_getframe(1))
            rec = self._record(fid, False)
        else:
            rec = _get()
        Probe.exit(self, fid)
        if rec is not None and rec.__class__ is list and rec[REC_PROBE] is self and rec[REC_ID] is not None:
            self.live.pop(rec[REC_ID], None)


def _hook_attrs(hooks, frame):
    try:
        return hooks.enter_frame(frame)
    except Exception:  # a hook must never break the program
        return None


def _in_measured(rec) -> bool:
    """Whether an open denoising-step span around the call (``rec``: the current record, then the ones it restores;
    one with ``diffusion.step`` that read memory at its entry) measures its memory already: a step-level span nested
    in the denoiser (a UNet's blocks, a transformer inside it) then takes no readings of its own (~30 us a span, a
    few percent of a small denoising step); its memory comes from the lane's samples, as any span's. The denoiser
    itself (inside the pipeline call, which has no step) keeps its readings."""
    n = 0
    while rec is not None and rec.__class__ is list and n < 64:
        a = rec[REC_ATTRS]
        if a is not None and "memory.rss_in" in a and STEP_ATTR in a:
            return True
        rec = rec[REC_RESTORE]
        n += 1
    return False


def _memory_in():
    m = span_memory
    try:
        return m.read_in() if m is not None else None
    except Exception:  # never into the program
        return None


def _memory_merge(attrs, readings):
    if not readings:
        return attrs
    if attrs is None:
        return readings
    attrs.update(readings)
    return attrs


def _memory_out(attrs) -> None:
    m = span_memory
    try:
        if m is not None:
            m.exit(attrs)
    except Exception:
        pass


def probe(probe_id: int) -> Probe | None:
    """The probe registered under ``probe_id``."""
    return _registry.get(probe_id)


def alias(probe_id: int, probe: Probe) -> None:
    """Have ``probe_id`` (a probe of an earlier session, whose id kept instrumented code notes:
    ``mechanism._KEPT``) name ``probe`` until ``unalias``."""
    _registry[probe_id] = probe


def unalias(probe_id: int) -> None:
    """Undo ``alias`` (an id that names its own probe stays)."""
    p = _registry.get(probe_id)
    if p is not None and p.id != probe_id:
        del _registry[probe_id]


def compiled(probe_id: int) -> None:
    """Note that the probe's function is being compiled into a torch.compile graph (called at trace
    time): its calls run inside the compiled region and are timed as part of the span around it."""
    p = _registry.get(probe_id)
    if p is None:
        return None
    note_compiled(p.name or (p.by_class[0][1] if p.by_class else "?"))
    return None


def note_compiled(name: str) -> None:
    """Record that ``name`` ran inside a compiled region, with the name of the span open around it."""
    rec = _get()
    outer = (rec[REC_NAME] or "") if rec is not None else ""
    top = native.ext.top_name() if native.ext is not None else None  # (a native span opened later is the inner one)
    if top is not None and (rec is None or rec[REC_ID] is None or buffer.parent_of(rec) != rec[REC_ID]):
        outer = top
    _compiled.setdefault(name, set()).add(outer)


def compiled_notes() -> dict[str, list[str]]:
    """Traced name -> the span names it was compiled inside ("" when no span was open)."""
    return {k: sorted(v) for k, v in _compiled.items()}


def reset_compiled_notes() -> None:
    _compiled.clear()
