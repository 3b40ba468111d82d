"""torch.distributed's collectives as spans with what they moved: op ``collective`` and, read from the call's own
frame at its entry, ``collective.bytes`` (the bytes of its tensors: ``numel() * element_size()`` summed over the
tensor, tensor list or input/output tensors it is given; the input side where both are), ``collective.group`` (the
process group's name, ``WORLD`` for the default group), ``collective.group_size`` (its ranks) and
``collective.async`` (``async_op=True``). Traced in every process of a job that imports
``torch.distributed.distributed_c10d`` (``processes.trace_collectives``). Stdlib only: torch objects are only read."""

from __future__ import annotations

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


def hooks_for(owner: object, attr: str):
    """Hooks for ``torch.distributed.distributed_c10d.<attr>`` (a collective or point-to-point call:
    ``CollectiveSite``) or for the backward that DDP's gradient all-reduce is joined with (``ddp.BackwardSite``),
    else None."""
    if getattr(owner, "__name__", None) == C10D and attr in COLLECTIVES:
        return CollectiveSite(attr)
    return ddp.hooks_for(owner, attr)
