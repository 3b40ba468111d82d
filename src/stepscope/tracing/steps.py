"""Denoising-step attribution for diffusers: the ``diffusion.step`` span attribute.

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

import functools
from contextvars import ContextVar

from . import buffer, workfacts

STEP_ATTR = "diffusion.step"
#: Set (True) on a denoiser span that runs inside another denoiser call: same step, not a step of its own.
NESTED_ATTR = "diffusion.nested"
_DENOISER_MODULES = ("diffusers.models.unets", "diffusers.models.transformers", "diffusers.models.controlnets",
                     "diffusers.models.controlnet")

class _Scope:
    __slots__ = ("counter", "outer", "marked", "last_t", "seen", "begun", "marking")

    def __init__(self, outer: "_Scope | None") -> None:
        self.begun = -1  # the last step whose start listeners were called
        self.counter = 0  # scheduler steps completed
        self.outer = outer
        self.marked = False  # a scheduler step ran in this scope
        self.last_t = None  # the denoiser's last timestep argument (identity only)
        self.seen = 0  # distinct timesteps the denoiser saw
        self.marking = 0  # scheduler steps open now (a subclass's step calling super().step(): one step)


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
        probe = rec[3]
        hooks = getattr(probe, "hooks", None)
        hooks = getattr(hooks, "inner", hooks)
        if hooks.__class__ is StepScoped and rec[4] is not None and STEP_ATTR in rec[4]:
            return rec[4][STEP_ATTR]
        rec = rec[7]
        n += 1
    return None


def _outer_denoiser(frame):
    """The outermost frame below ``frame`` (``frame`` included) that is a diffusers denoiser's ``forward``."""
    outer = None
    f = frame
    while f is not None:
        code = f.f_code
        if code.co_name == "forward" and (f.f_globals.get("__name__") or "").startswith(_DENOISER_MODULES):
            outer = f
        f = f.f_back
    return outer


def _timestep_of(frame, loc=None):
    """A denoiser forward frame's ``timestep`` argument (by name, else its third parameter). ``loc``: the frame's
    ``f_locals`` when read already."""
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if loc is None:
        loc = frame.f_locals
    if "timestep" in names:
        return loc.get("timestep")
    return loc.get(names[2]) if len(names) > 2 else None


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
            attrs = self._tag(s, _timestep_of(outer), True)
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
        loc = frame.f_locals  # (one read: on 3.11 each builds the dict again, a few us)
        workfacts.note_denoiser(frame, loc)  # its weights' device/dtype, once per module (`stepscope diff`)
        s = _current()
        outer = _outer_denoiser(frame)
        if outer is None or outer is frame:
            attrs = self._tag(s, _timestep_of(frame, loc), False)
        else:
            attrs = self._tag(s, _timestep_of(outer), True)
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


def hooks_for(owner: object, attr: str):
    """The step hooks for ``owner.attr`` (a class and a method name), or None when no rule applies."""
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


@functools.lru_cache(maxsize=4096)
def kind_of_name(name: str) -> str | None:
    """The rule above for a span named by its qualified name (``module.Class.method``, the defining
    module, as the Sentry SDK names ``functions_to_trace`` spans): "scope", "marker", "scoped" or None.
    Read from the module path, since there is no class to look at."""
    if name.startswith("diffusers.pipelines.") and name.endswith(".__call__"):
        return "scope"
    if name.startswith("diffusers.schedulers.") and name.endswith(".step"):
        return "marker"
    if name.startswith(tuple(m + "." for m in _DENOISER_MODULES)) and name.endswith(".forward"):
        return "scoped"
    return None


def steps_from_names(spans) -> dict:
    """``diffusion.step`` for spans recorded elsewhere (ingested from the Sentry SDK), by the same rules as
    the live hooks. ``spans``: ``(span id, parent id | None, name, start_ns, thread id)``. Returns span id
    -> step index for the scheduler steps and denoiser forwards.

    Differences forced by working after the fact: without a traced scheduler step in a scope, each
    outermost denoiser call is a new step (the live rule compares the ``timestep`` argument, which a
    span does not carry: right for batched classifier-free guidance); a denoiser nested in another
    gets the outer one's step, as it shares its timestep live.
    """
    spans = sorted(spans, key=lambda s: s[3])
    kind = {s[0]: kind_of_name(s[2]) for s in spans}
    parent = {s[0]: s[1] for s in spans}

    def nearest(sid, want: str):
        p = parent.get(sid)
        while p is not None and p in kind:
            if kind[p] == want:
                return p
            p = parent.get(p)
        return None

    scopes: dict = {}
    for sid, _, _, _, tid in spans:
        if kind[sid] in ("marker", "scoped"):
            scopes.setdefault(nearest(sid, "scope") or ("thread", tid), []).append(sid)
    out: dict = {}
    for members in scopes.values():
        marked = any(kind[m] == "marker" for m in members)
        counter = 0
        for sid in members:  # in start order
            if kind[sid] == "marker":
                out[sid] = counter
                counter += 1
            elif marked:
                out[sid] = counter
            else:
                outer = nearest(sid, "scoped")
                if outer is not None:
                    out[sid] = out[outer]
                else:
                    out[sid] = counter
                    counter += 1
    return out
