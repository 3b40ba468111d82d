"""Denoising-step attribution for diffusers: the ``diffusion.step`` span attribute.

Rules, decided once per patched target from the class's MRO names (diffusers is never imported here):

- a ``DiffusionPipeline`` subclass's ``__call__`` opens a *step scope* (its step counter starts at 0);
- a ``SchedulerMixin`` subclass's ``step`` is a *step marker*: its span gets ``diffusion.step`` = the
  scope's counter, and the counter advances when it returns;
- the denoiser's ``forward`` (a class from ``diffusers.models.unets`` or ``diffusers.models.transformers``)
  is *step scoped*: its span gets ``diffusion.step`` = the counter, i.e. the index of the scheduler step
  that follows it. This holds with classifier-free guidance batched (one UNet call per step) or not
  (two calls per step, both get the same index).

Without a traced pipeline call around them, one scope per thread/task runs for the whole program, so
the index keeps counting across pipeline calls.
"""

from __future__ import annotations

from contextvars import ContextVar

STEP_ATTR = "diffusion.step"

# The innermost step scope: [counter, enclosing scope or None].
_scope: ContextVar[list | None] = ContextVar("stepscope_step_scope", default=None)


def _current() -> list:
    s = _scope.get()
    if s is None:
        s = [0, None]
        _scope.set(s)
    return s


class StepScope:
    """Hooks for a pipeline call: a fresh step counter for the duration of the call."""

    __slots__ = ()

    def enter(self) -> None:
        _scope.set([0, _scope.get()])
        return None

    def exit(self) -> None:
        s = _scope.get()
        _scope.set(s[1] if s is not None else None)


class StepMarker:
    """Hooks for a scheduler's ``step``: tags the span, then advances the counter."""

    __slots__ = ()

    def enter(self) -> dict:
        return {STEP_ATTR: _current()[0]}

    def exit(self) -> None:
        _current()[0] += 1


class StepScoped:
    """Hooks for the denoiser's ``forward``: tags the span with the current step index."""

    __slots__ = ()

    def enter(self) -> dict:
        return {STEP_ATTR: _current()[0]}

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
    if attr == "forward" and any(
        (c.__module__ or "").startswith(("diffusers.models.unets", "diffusers.models.transformers")) for c in mro
    ):
        return StepScoped()
    return None
