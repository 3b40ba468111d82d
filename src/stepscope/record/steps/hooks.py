"""The live step hooks (``core.steprules``' table): the ``diffusion.step`` span attribute, and loop iterations as spans.

Rules, decided once per patched target from the class's MRO names (diffusers is never imported here):

- a ``DiffusionPipeline`` subclass's ``__call__`` opens a *step scope* (its step counter starts at 0);
- a ``SchedulerMixin`` subclass's ``step`` is a *step marker*: its span gets ``diffusion.step`` = the
  scope's counter, and the counter advances when it returns;
- the denoiser's ``forward`` (a class from ``diffusers.models.unets`` or ``diffusers.models.transformers``)
  is *step scoped*: its span gets ``diffusion.step`` = the counter, i.e. the index of the scheduler step
  that follows it. This holds with classifier-free guidance batched (one UNet call per step) or not
  (two calls per step, both get the same index). When no scheduler step is traced in the scope, the
  denoiser counts steps itself: a new ``timestep`` argument object means a new step (the pipeline's
  ``for i, t in enumerate(timesteps)`` hands each step a new one; CFG's two calls share it). The
  argument is compared by identity only, never read, so no device sync is added.

A denoiser module called *inside* the denoiser (the ``Transformer2DModel`` blocks of a UNet, a ControlNet
called from a step) is part of that step, never a step of its own: the hooks look down the stack for the
outermost denoiser ``forward`` frame (traced or not) and count that frame's ``timestep`` argument, so
every nested call shares the outer call's step index; a nested span also gets ``diffusion.nested`` =
True so that tables count the outer call only.

Without a traced pipeline call around them, one scope per thread/task runs for the whole program, so
the index keeps counting across pipeline calls. The scope holds the last timestep object until the
scope ends (a 0-d tensor).
"""

from __future__ import annotations

from contextvars import ContextVar
from threading import get_ident
from time import perf_counter_ns

from .. import native
from ..spans import buffer
from ..spans.record import REC_ATTRS, REC_ERROR, REC_PROBE, REC_RESTORE, REC_START, finished
from . import cpuwait, workfacts
from ...core.steprules import DENOISER_MODULES as _DENOISER_MODULES
from ...core.steprules import NESTED_ATTR, STEP_ATTR, STEP_OP, STEP_SUFFIX, loop_rule


class _Scope:
    __slots__ = ("counter", "outer", "marked", "last_t", "seen", "begun", "marking", "loop")

    def __init__(self, outer: "_Scope | None") -> None:
        self.begun = -1  # the last step whose start listeners were called
        self.counter = 0  # scheduler steps completed
        self.outer = outer
        self.marked = False  # a scheduler step ran in this scope
        self.last_t = None  # the denoiser's last timestep argument (identity only)
        self.seen = 0  # distinct timesteps the denoiser saw
        self.marking = 0  # scheduler steps open now (a subclass's step calling super().step(): one step)
        self.loop: _Loop | None = None  # a loop scope's iteration state


# The innermost step scope.
_scope: ContextVar[_Scope | None] = ContextVar("stepscope_step_scope", default=None)


def _current() -> _Scope:
    s = _scope.get()
    if s is None:
        s = _Scope(None)
        _scope.set(s)
    return s


class StepScope:
    """Hooks for a pipeline call: a fresh step counter for the duration of the call."""

    __slots__ = ()

    def enter(self, args: tuple, kwargs: dict) -> None:
        _scope.set(_Scope(_scope.get()))
        return None

    def enter_frame(self, frame) -> None:
        workfacts.note_pipeline(frame)  # what shapes the work, for `stepscope diff`
        return self.enter((), {})

    def exit(self) -> None:
        s = _scope.get()
        _scope.set(s.outer if s is not None else None)


#: Called with no argument after every scheduler step (the device capture steps its profiler).
_listeners: list = []


def add_listener(fn) -> None:
    """Call ``fn()`` after every traced scheduler step."""
    _listeners.append(fn)


def remove_listener(fn) -> None:
    try:
        _listeners.remove(fn)
    except ValueError:
        pass


#: Called with the step index when the denoiser's first call of a new step starts (metrics snapshots).
_start_listeners: list = []


def add_start_listener(fn) -> None:
    """Call ``fn(step)`` when the first denoiser call of each step starts."""
    _start_listeners.append(fn)


def remove_start_listener(fn) -> None:
    try:
        _start_listeners.remove(fn)
    except ValueError:
        pass


def _began(s: "_Scope", attrs: dict) -> dict:
    step = attrs[STEP_ATTR]
    if step != s.begun:
        s.begun = step
        for fn in tuple(_start_listeners):
            try:
                fn(step)
            except Exception:  # a listener must never break the program
                pass
    return attrs


class StepMarker:
    """Hooks for a scheduler's ``step``: tags the span, then advances the counter."""

    __slots__ = ()

    def enter(self, args: tuple, kwargs: dict) -> dict:
        s = _current()
        s.marked = True
        s.marking += 1
        if s.marking > 1:  # inside another scheduler step (an override calling super().step()): the same step
            return {STEP_ATTR: s.counter, NESTED_ATTR: True}
        return {STEP_ATTR: s.counter}

    def enter_frame(self, frame) -> dict:
        return self.enter((), {})

    def exit(self) -> None:
        s = _current()
        s.marking = max(0, s.marking - 1)
        if s.marking:  # the inner call of one step: the outer one advances the counter
            return
        s.counter += 1
        for fn in tuple(_listeners):
            try:
                fn()
            except Exception:  # a listener must never break the program
                pass


def _open_denoiser_step():
    """The step of the innermost open span of a traced denoiser's ``forward`` in this thread or task
    (``buffer.current_span``'s records, whose hooks are ``StepScoped``, mirrored or not), or None."""
    return open_step_of(buffer.current_span.get())


def open_step_of(rec):
    """``_open_denoiser_step`` from the open-span record ``rec`` (the current one, then those it restores)."""
    n = 0
    while rec is not None and rec.__class__ is list and n < 256:
        probe = rec[REC_PROBE]
        hooks = getattr(probe, "hooks", None)
        hooks = getattr(hooks, "inner", hooks)
        if hooks.__class__ is StepScoped and rec[REC_ATTRS] is not None and STEP_ATTR in rec[REC_ATTRS]:
            return rec[REC_ATTRS][STEP_ATTR]
        rec = rec[REC_RESTORE]
        n += 1
    return None


#: code object -> whether it is a diffusers denoiser's ``forward`` (``_outer_denoiser``), decided at its first sight
_is_denoiser: dict = {}
#: code object of a denoiser forward -> (arguments read, index of the timestep among them or -1) (``_denoiser_args``)
_arg_plan: dict = {}
#: the C read of a frame's arguments in place (``_native.frame_args``), or None: ``f_locals``
_frame_args = getattr(native.ext, "frame_args", None)
#: the C walk of the interpreter's frames for ``_outer_denoiser`` (``_native.outer_denoiser``), or None
_outer_c = getattr(native.ext, "outer_denoiser", None)


def _outer_denoiser(frame):
    """The outermost frame below ``frame`` (``frame`` included) that is a diffusers denoiser's ``forward``. Walked in
    C where the extension can (no frame object made for each caller, ~30 us a denoiser call on a cooled cache on
    3.11): it answers None, ``frame``, or that a caller is the one, which this walk then finds."""
    if _outer_c is not None:
        hit = _outer_c(frame, _DENOISER_MODULES)
        if hit is not True:
            return hit
    outer = None
    f = frame
    known = _is_denoiser
    while f is not None:
        code = f.f_code
        hit = known.get(code)
        if hit is None:
            if len(known) > 8192:  # (code objects made at run time: never an unbounded table)
                known.clear()
            hit = known[code] = code.co_name == "forward" and (f.f_globals.get("__name__") or "").startswith(
                _DENOISER_MODULES)
        if hit:
            outer = f
        f = f.f_back
    return outer


def _denoiser_args(frame) -> tuple:
    """``(module, sample, timestep)`` of a denoiser forward's frame: its first two arguments and its ``timestep``
    argument (by name, else its third parameter), None where it has none. Read in place where the C extension can
    (``_native.frame_args``), else from ``f_locals`` (3.11, 3.12: a dict of every local built at each read)."""
    code = frame.f_code
    plan = _arg_plan.get(code)
    if plan is None:
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        ts = names.index("timestep") if "timestep" in names else (2 if len(names) > 2 else -1)
        plan = _arg_plan[code] = (max(ts + 1, min(2, len(names))), ts)
    n, ts = plan
    if _frame_args is not None:
        args = _frame_args(frame, n)
    else:
        loc, names = frame.f_locals, code.co_varnames
        args = tuple(loc.get(names[i]) for i in range(n))
    return (args[0] if n > 0 else None, args[1] if n > 1 else None, args[ts] if ts >= 0 else None)


class StepScoped:
    """Hooks for the denoiser's ``forward``: tags the span with the current step index (see the module
    doc for a denoiser nested in another)."""

    __slots__ = ()

    def enter(self, args: tuple, kwargs: dict) -> dict:
        import sys

        caller = sys._getframe(1)
        outer = _outer_denoiser(caller)
        s = _current()
        if outer is not None:  # a wrapped denoiser called from inside a denoiser forward
            attrs = self._tag(s, _denoiser_args(outer)[2], True)
        else:
            t = args[2] if len(args) > 2 else kwargs.get("timestep")  # forward(self, sample, timestep, ...)
            attrs = self._tag(s, t, False)
        return _began(s, attrs) if _start_listeners else attrs

    def enter_frame(self, frame) -> dict:
        """The same from the forward's own frame (probes). Inside a traced denoiser's open span (a UNet's blocks,
        a transformer in it, when they are traced too) the call takes that span's step, as the stack walk would
        find, without walking the stack or reading frames' locals (~15 us a call on 3.11)."""
        step = _open_denoiser_step()
        if step is not None:
            return {STEP_ATTR: step, NESTED_ATTR: True}
        mod, sample, t = _denoiser_args(frame)
        workfacts.note_denoiser(mod, sample)  # its weights' device/dtype, once per module (`stepscope diff`)
        s = _current()
        outer = _outer_denoiser(frame)
        if outer is None or outer is frame:
            attrs = self._tag(s, t, False)
        else:
            attrs = self._tag(s, _denoiser_args(outer)[2], True)
        return _began(s, attrs) if _start_listeners else attrs

    @staticmethod
    def _tag(s: "_Scope", t, nested: bool) -> dict:
        if s.marked:
            step = s.counter
        else:
            if t is not s.last_t or s.seen == 0:
                s.last_t = t
                s.seen += 1
            step = s.seen - 1
        return {STEP_ATTR: step, NESTED_ATTR: True} if nested else {STEP_ATTR: step}

    def exit(self) -> None:
        return None


class _Loop:
    """A loop scope's state in one call: its code, the iteration open now (an open-span record, see
    ``tracing.probes``), its index, and the last time the loop's head ran (ns) while one was open."""

    __slots__ = ("code", "rec", "index", "head_ns", "at_head", "name")

    def __init__(self, code, name: str) -> None:
        self.code = code
        self.rec = None
        self.index = 0
        self.head_ns = 0
        self.at_head = False
        self.name = name


class LoopScope(StepScope):
    """Hooks for a sampler function whose loop iterations are its steps (``loop`` rules): a step scope, and one
    span per iteration (op ``step``, ``diffusion.step`` = the iteration's index from 0 in this call), current
    while the iteration runs, so that the calls it makes nest under it. ``loop``: the ``steps.loops.LoopSpec``
    the tracing mechanism watches; it calls ``head``, ``begin`` and ``end`` (``tracing.monitoring`` from LINE
    events on 3.12+, the instrumented code on 3.11: ``tracing.codeswap``)."""

    __slots__ = ("loop", "code", "name")

    def __init__(self, loop, code, name: str) -> None:
        self.loop = loop
        self.code = code
        self.name = name + STEP_SUFFIX

    def enter_frame(self, frame) -> None:
        s = _Scope(_scope.get())
        s.loop = _Loop(self.code, self.name)
        _scope.set(s)
        return None

    @staticmethod
    def _state(code):
        s = _scope.get()
        lp = s.loop if s is not None else None
        return lp if lp is not None and lp.code is code else None

    def head(self) -> None:
        """The loop's head line ran: an iteration may end here (3.12+)."""
        lp = self._state(self.code)
        if lp is not None:
            lp.head_ns = perf_counter_ns()
            lp.at_head = True

    def begin(self, after_head: bool = True) -> None:
        """An iteration's body starts (the previous iteration ends where the head last ran, or now).
        ``after_head``: only when the head ran just before (3.12+'s LINE events: the body's first line may run
        again inside the iteration)."""
        lp = self._state(self.code)
        if lp is None or (after_head and not lp.at_head):
            return
        now = perf_counter_ns()
        start = lp.head_ns if lp.at_head and lp.head_ns else now
        lp.at_head = False
        if lp.rec is not None:
            _close(lp, start, None)
        prev = buffer.current_span.get()
        k = lp.index
        lp.index += 1
        attrs = {STEP_ATTR: k}
        rd = cpuwait.current
        if rd is not None:  # the thread's wait for a CPU so far (``steps.cpuwait``): ~2 us
            rd.enter(attrs)
        rec = [buffer.next_span_id(), start, buffer.parent_of(prev), _ITER, attrs, lp.name, None, prev]
        lp.rec = rec
        buffer.current_span.set(rec)
        if _start_listeners:
            for fn in tuple(_start_listeners):
                try:
                    fn(k)
                except Exception:  # a listener must never break the program
                    pass

    def end(self, error: str | None = None) -> None:
        """The loop is left (a line after it ran, or the function returns or raises): the open iteration ends where
        the head last ran (the loop's exhausted test), else now."""
        lp = self._state(self.code)
        if lp is not None and lp.rec is not None:
            now = perf_counter_ns()
            _close(lp, lp.head_ns if lp.at_head and lp.head_ns >= lp.rec[REC_START] else now, error)
        if lp is not None:
            lp.at_head = False

    def exit(self) -> None:
        s = _scope.get()
        if s is not None and s.loop is not None and s.loop.code is self.code:
            _scope.set(s.outer)


#: The ``probe`` slot of a loop iteration's open-span record (``tracing.probes``' records): only its ``op``
#: and ``hooks`` are read.
class _IterationProbe:
    __slots__ = ()
    op = STEP_OP
    hooks = None
    name = None


_ITER = _IterationProbe()


def _close(lp: _Loop, end: int, error: str | None) -> None:
    rec = lp.rec
    lp.rec = None
    if error is not None and rec[REC_ERROR] is None:
        rec[REC_ERROR] = error
    rd = cpuwait.current
    if rd is not None:
        rd.exit(rec[REC_ATTRS])
    buffer.finished.append(finished(rec, STEP_OP, max(end, rec[REC_START]), get_ident()))
    if buffer.current_span.get() is rec:
        buffer.current_span.set(rec[REC_RESTORE])
    for fn in tuple(_listeners):
        try:
            fn()
        except Exception:  # a listener must never break the program
            pass


def hooks_for(owner: object, attr: str, fn=None):
    """The step hooks for ``owner.attr`` (a class or a module, and a function or method name), or None when no
    rule applies. ``fn``: the Python function behind it (for the ``loop`` rules, named by its defining module
    and qualname; a ``LoopScope`` when its code has a step loop, else a ``StepScope``)."""
    code = getattr(fn, "__code__", None)
    if code is not None:
        qualified = f"{getattr(fn, '__module__', None) or ''}.{getattr(fn, '__qualname__', '')}"
        if loop_rule(qualified) is not None:
            from .loops import loop_of_code

            spec = loop_of_code(code)
            return LoopScope(spec, code, qualified) if spec is not None else StepScope()
    if not isinstance(owner, type):
        return None
    mro = owner.__mro__
    if not any((c.__module__ or "").startswith("diffusers.") for c in mro):
        return None
    names = {c.__name__ for c in mro}
    if attr == "__call__" and "DiffusionPipeline" in names:
        return StepScope()
    if attr == "step" and "SchedulerMixin" in names:
        return StepMarker()
    if attr == "forward" and any((c.__module__ or "").startswith(_DENOISER_MODULES) for c in mro):
        return StepScoped()
    return None
