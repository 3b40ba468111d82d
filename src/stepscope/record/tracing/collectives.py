"""torch.distributed's collectives as spans with what they moved: op ``collective`` and, read from the call's own
frame at its entry, ``collective.bytes`` (the bytes of its tensors: ``numel() * element_size()`` summed over the
tensor, tensor list or input/output tensors it is given; the input side where both are), ``collective.group`` (the
process group's name, ``WORLD`` for the default group), ``collective.group_size`` (its ranks) and
``collective.async`` (``async_op=True``). Traced in every process of a job that imports
``torch.distributed.distributed_c10d`` (``parts.Collectives``). Stdlib only: torch objects are only read.

``destroy_process_group`` is a span too (op ``process_group``, ``GroupEndSite``), and where the torch profiler has
run in the process (``hold_groups``, turned on by ``device.capture`` with ``hold_destroyed_groups()``) it keeps the
groups it destroys alive until the session finishes (``release_groups``). Why: while the profiler records, each gloo
work captures the thread's ``ThreadLocalState``, which inside ``backward`` holds a Python object (torch >= 2.12
stashes a ``contextvars.Context`` there: ``torch.autograd.graph._engine_run_backward``). A gloo worker thread that
drops the last reference to such a work must take the GIL. If the program's DDP model is freed after
``destroy_process_group`` (the usual end of a script), its reducer holds the last reference to the group, and
freeing it joins the gloo worker threads with the GIL held: when a worker is waiting for the GIL at that moment, the
process hangs. Measured here (torch 2.13, 2 ranks, gloo, CPU, ``tests/programs/ranks/train.py`` under
``torch.profiler.profile`` alone, no stepscope): 6 hangs in 30 runs. Holding the group moves its destruction to
``release_groups``, where the process-group binding releases the GIL first (pytorch/pytorch#56381, #154976).
A program that never destroys its group, or frees its model first, is not changed."""

from __future__ import annotations

import sys

from . import ddp

#: the module whose functions are hooked
C10D = "torch.distributed.distributed_c10d"
#: its collectives and point-to-point calls, traced in every process that imports it (no name needed): the time a
#: rank waits in them for the others is the straggler's cost
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list",
               "reduce", "gather", "scatter", "barrier", "monitored_barrier", "send", "recv", "isend", "irecv",
               "batch_isend_irecv")
#: argument names that hold what a collective sends, in the order they are looked for
_SENT = ("tensor", "input_tensor", "input_tensor_list", "tensor_list", "input", "inputs", "output_tensor",
         "output_tensor_list", "output")


def _nbytes(x) -> int | None:
    """Bytes of a tensor or of a list/tuple of tensors (None: not tensors)."""
    if isinstance(x, (list, tuple)):
        sizes = [_nbytes(t) for t in x]
        sizes = [s for s in sizes if s is not None]
        return sum(sizes) if sizes else None
    numel, size = getattr(x, "numel", None), getattr(x, "element_size", None)
    if callable(numel) and callable(size):
        return int(numel()) * int(size())
    return None


class CollectiveSite:
    """Probe hooks of one collective (see the module): attributes at entry, nothing at exit."""

    __slots__ = ("name",)
    op = "collective"

    def __init__(self, name: str) -> None:
        self.name = name

    def enter_frame(self, frame) -> dict:
        args = frame.f_locals
        out: dict = {}
        for key in _SENT:
            n = _nbytes(args.get(key))
            if n is not None:
                out["collective.bytes"] = n
                break
        group = args.get("group")
        if group is None and "group" in args:
            out["collective.group"] = "WORLD"
        elif group is not None:
            name = getattr(group, "group_name", None)
            out["collective.group"] = str(name) if name is not None else type(group).__name__
            size = getattr(group, "size", None)
            if callable(size):
                try:
                    out["collective.group_size"] = int(size())
                except Exception:
                    pass
        if args.get("async_op"):
            out["collective.async"] = True
        return out

    def enter(self, args: tuple, kwargs: dict) -> dict:
        return {}

    def exit(self) -> None:
        return None


#: the call that ends process groups (``GroupEndSite``)
GROUP_END = "destroy_process_group"
#: whether ``GroupEndSite`` keeps the groups it sees destroyed (``hold_destroyed_groups``: once the torch profiler has
#: run in the process)
hold_groups = False
#: at most this many destroyed groups are kept (a program that makes and destroys groups in a loop)
MAX_HELD = 64
_held: list = []


class GroupEndSite:
    """Probe hooks of ``destroy_process_group``: a span of op ``process_group``; with ``hold_groups``, the groups it
    destroys (its ``group`` argument, or every group when that is None: the default one and ``_world.pg_map``'s)
    are referenced from ``_held`` until ``release_groups`` (see the module)."""

    __slots__ = ("name",)
    op = "process_group"

    def __init__(self, name: str) -> None:
        self.name = name

    def enter_frame(self, frame) -> None:
        if hold_groups and len(_held) < MAX_HELD:
            try:
                _hold(frame.f_locals.get("group"))
            except Exception:  # (torch internals moved: nothing held, the program unchanged)
                pass
        return None

    def enter(self, args: tuple, kwargs: dict) -> None:
        return None

    def exit(self) -> None:
        return None


def _hold(group) -> None:
    if group is not None:
        _held.append(group)
        return
    c10d = sys.modules.get(C10D)
    world = getattr(getattr(c10d, "GroupMember", None), "WORLD", None)
    groups = [world] if world is not None else []
    pg_map = getattr(getattr(c10d, "_world", None), "pg_map", None)
    if isinstance(pg_map, dict):
        groups += [g for g in pg_map if g is not world]
    _held.extend(groups[:MAX_HELD - len(_held)])


def hold_destroyed_groups() -> None:
    """From now on, ``GroupEndSite`` keeps the groups that ``destroy_process_group`` destroys (at most ``MAX_HELD``)
    until ``release_groups``: called once the torch profiler has run in the process (``device.capture``), whose gloo
    works then hold Python objects (see the module). For the rest of the process: never turned off."""
    global hold_groups
    hold_groups = True


def release_groups() -> None:
    """Drop the groups ``GroupEndSite`` kept (at the session's finish, while the interpreter is whole); those no
    longer referenced elsewhere are destroyed now, with the GIL released by torch's binding."""
    _held.clear()


def hooks_for(owner: object, attr: str):
    """Hooks for ``torch.distributed.distributed_c10d.<attr>`` (a collective or point-to-point call:
    ``CollectiveSite``; ``destroy_process_group``: ``GroupEndSite``) or for the backward that DDP's gradient
    all-reduce is joined with (``ddp.BackwardSite``), else None."""
    if getattr(owner, "__name__", None) == C10D:
        if attr in COLLECTIVES:
            return CollectiveSite(attr)
        if attr == GROUP_END:
            return GroupEndSite(attr)
    return ddp.hooks_for(owner, attr)
