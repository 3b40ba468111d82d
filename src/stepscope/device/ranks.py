"""The device timelines of a job's ranks side by side: per rank, the device's busy and idle time and how much of its
communication overlapped computation, with the same definitions as Holistic Trace Analysis (HTA) so that the figures
can be checked against it on the same per-rank traces.

Per rank (one Kineto trace each, ``device.kineto.KinetoTrace``), over its device activity (kernels, memcpy, memset:
``DEVICE_CATS``) on every stream, in its complete profiler steps (``complete_steps``: the last ``ProfilerStep#N``, cut
by the capture's end, left out as HTA does):

- the kernels are *communication* (the name matches ``^nccl.*Kernel``, HTA's ``KernelType.COMMUNICATION``), *memory*
  (``gpu_memcpy``/``gpu_memset``) or *computation* (every other kernel);
- ``span_ns``: the first activity's start to the last one's end; ``busy_ns``: the union of all activities' intervals
  (the time the device ran something, on any stream); ``idle_ns = span - busy`` (HTA's temporal breakdown:
  ``idle_time``, ``kernel_time``); ``compute_ns``: the union of the computation kernels (HTA's ``compute_time``);
  ``non_compute_ns = busy - compute`` (``non_compute_time``);
- ``comm_ns``: the union of the communication kernels; ``overlap_ns``: the time inside both that union and the
  computation kernels' union; ``overlap_share = overlap / comm`` (HTA's ``get_comm_comp_overlap``: the share of
  communication time during which the device also computed).

Across ranks (``RanksDevice``): the rank idle the longest and the one idle the least, and the spread between them
(a straggler's peers wait for it in their collectives: their communication kernels run long and their computation
share drops).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .kineto import CAT, DEVICE_CATS, KinetoTrace

#: a communication kernel's name (HTA's ``NCCL_KERNEL_RE``)
_NCCL = re.compile(r"^nccl.*Kernel")


@dataclass
class RankDevice:
    """One rank's device time (ns; see the module). ``rank``: from the trace's ``distributedInfo`` (or the order the
    traces were given in); ``label``: the trace file or the process; ``kernels``: device activities counted."""

    rank: int
    label: str
    kernels: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int
    non_compute_ns: int
    comm_ns: int
    memory_ns: int
    overlap_ns: int
    overlap_share: float | None
    world_size: int | None = None
    backend: str | None = None


@dataclass
class RanksDevice:
    """A job's ranks, in rank order, with the most and least idle rank (by ``idle_ns``) and the spread (ns)."""

    ranks: list[RankDevice]
    most_idle: int | None = None
    least_idle: int | None = None
    idle_spread_ns: int = 0
    notes: list[str] = field(default_factory=list)


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[start, end)`` as sorted disjoint intervals."""
    if not len(start):
        return start.astype(np.int64), end.astype(np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order].astype(np.int64), end[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first) if len(first) else e[:0]


def _length(s: np.ndarray, e: np.ndarray) -> int:
    return int((e - s).sum())


def _intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length (ns) of the intersection of two unions of disjoint sorted intervals."""
    (sa, ea), (sb, eb) = a, b
    if not len(sa) or not len(sb):
        return 0
    # each interval of a against the intervals of b it can touch: prefix sums of b's lengths, clipped at both ends
    cum = np.concatenate([[0], np.cumsum(eb - sb)])
    lo = np.searchsorted(eb, sa, "right")  # first b ending after a starts
    hi = np.searchsorted(sb, ea, "left")  # first b starting at or after a's end
    total = 0
    has = hi > lo
    if has.any():
        lo_h, hi_h, sa_h, ea_h = lo[has], hi[has], sa[has], ea[has]
        inner = cum[hi_h] - cum[lo_h]
        # clip the first and the last b interval of each run to a's bounds
        inner -= np.maximum(sa_h - sb[lo_h], 0)
        inner -= np.maximum(eb[hi_h - 1] - ea_h, 0)
        total = int(inner.sum())
    return total


def complete_steps(trace: KinetoTrace) -> np.ndarray:
    """Per event: whether it belongs to the trace's complete profiler steps. With two or more ``ProfilerStep#N``
    annotations, the device activity launched before the last one starts (its launch, matched by ``correlation``,
    begins earlier): the last step is usually cut by the end of the capture (HTA's ``align_and_filter_trace``).
    Otherwise every event."""
    steps = np.array([n.startswith("ProfilerStep") for n in map(str, trace.names)] + [False], bool)[trace.name]
    host = trace.stream < 0
    steps &= host
    keep = np.ones(len(trace.ts), bool)
    if steps.sum() < 2:
        return keep
    last = trace.ts[steps].max()
    launched = np.unique(trace.correlation[host & (trace.ts < last) & (trace.correlation >= 0)])
    dev = ~host
    keep[dev] = np.isin(trace.correlation[dev], launched)
    return keep


def rank_device(trace: KinetoTrace, label: str, rank: int | None = None) -> RankDevice:
    """One rank's device time from its trace (``rank``: when the trace has no ``distributedInfo``)."""
    info = trace.distributed or {}
    r = info.get("rank") if isinstance(info.get("rank"), int) else rank
    dev = np.isin(trace.cat, DEVICE_CATS) & complete_steps(trace)
    st, en = trace.ts[dev], trace.end[dev]
    names = trace.names
    comm_code = np.array([bool(_NCCL.match(str(n))) for n in names] + [False], bool)
    is_comm = comm_code[trace.name[dev]] & (trace.cat[dev] == CAT["kernel"])  # (HTA: ^nccl.*Kernel)
    is_mem = trace.cat[dev] != CAT["kernel"]
    is_comp = ~is_comm & ~is_mem
    busy = _union(st, en)
    comp = _union(st[is_comp], en[is_comp])
    comm = _union(st[is_comm], en[is_comm])
    mem = _union(st[is_mem], en[is_mem])
    span = int(en.max() - st.min()) if len(st) else 0
    busy_ns, comp_ns, comm_ns = _length(*busy), _length(*comp), _length(*comm)
    overlap = _intersection(comm, comp)
    return RankDevice(int(r) if r is not None else -1, label, int(dev.sum()), span, busy_ns, span - busy_ns, comp_ns,
                      busy_ns - comp_ns, comm_ns, _length(*mem), overlap, overlap / comm_ns if comm_ns else None,
                      info.get("world_size") if isinstance(info.get("world_size"), int) else None,
                      info.get("backend") if isinstance(info.get("backend"), str) else None)


def ranks_device(items: list[tuple]) -> RanksDevice:
    """Every rank's device time: ``items`` as ``(label, trace)`` or ``(label, trace, rank)``; ranks from the traces'
    ``distributedInfo``, else the rank given, else their position."""
    ranks = sorted((rank_device(it[1], it[0], it[2] if len(it) > 2 and it[2] is not None else k)
                    for k, it in enumerate(items)), key=lambda x: (x.rank, x.label))
    out = RanksDevice(ranks)
    with_device = [x for x in ranks if x.kernels]
    if len(with_device) >= 2:
        most = max(with_device, key=lambda x: x.idle_ns)
        least = min(with_device, key=lambda x: x.idle_ns)
        out.most_idle, out.least_idle = most.rank, least.rank
        out.idle_spread_ns = most.idle_ns - least.idle_ns
    if not with_device:
        out.notes.append("no device activity in these traces (a CPU run: no kernels)")
    return out
