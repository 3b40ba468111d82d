"""A job's processes read as one run: the top run's data with each process run's spans, samples and threads joined
in (``join``), on the one clock they were recorded on (``time.perf_counter_ns``, CLOCK_MONOTONIC: the same in every
process of a host).

Processes on other hosts (runs ingested by ``stepscope serve`` from several machines: ``ingest.apply.clock_offsets``)
keep their own host's wall clock; their facts' ``clock_offset_ns`` (that host's clock minus the job's first host's,
estimated from shared collectives) is taken off their span and sample times here, so the hosts line up.

Ids are made unique across processes without touching the top run's (``jobids``: span ids moved up, thread ids
renumbered per process); frames and stacks are appended with their indices moved up. Each thread of a
process run is named after its process (``process_label``): ``rank 1 (pid 4242) · MainThread``. Memory lanes are joined with
each sample's process (``MemoryTrack.process``). Thread names and labels come from the process facts (``core.procs.run_facts``).
"""

from __future__ import annotations

import numpy as np

from ..core.jobids import LABEL_SEP, SPAN_SHIFT, THREAD_BASE
from ..core.model import MemoryTrack, Profile, Run, RunData
from ..core.spantable import NO_PARENT, SpanTable
from .db import job_unresolved

def process_label(run: Run) -> str:
    """How a process of a job is named: ``rank N (pid P)`` for a torch.distributed rank, else ``pid P`` and its
    program (script or ``-m`` module)."""
    p = run.process or {}
    if "rank" in p:
        return f"rank {p['rank']} (pid {run.pid})"
    prog = program_of(run.command)
    return f"pid {run.pid} {prog}".rstrip()


def program_of(command: list[str]) -> str:
    """The program of a command line as a user knows it: the script's file name (``train.py``), the ``-m`` module,
    ``-c``; "" when there is none."""
    import os

    args = list(command or [])[1:]
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            return args[i + 1]
        if a == "-c":
            return "-c"
        if not a.startswith("-"):
            return os.path.basename(a)
    return ""


def _remap(values: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``values`` with each of ``old`` (sorted, unique) replaced by the ``new`` at its position."""
    if not len(values):
        return values.astype(np.int64)
    pos = np.searchsorted(old, values)
    return new[np.clip(pos, 0, len(new) - 1)]


def join(top: RunData, parts: list[RunData]) -> RunData:
    """``top`` with ``parts`` (the process runs, in start order) joined in; ``top.processes`` lists them (each
    ``Run`` with its own span and sample counts). ``parts`` empty: ``top`` unchanged."""
    if not parts:
        return top
    tables = [top.spans]
    prof = top.profile
    frames = list(prof.frames)
    stacks = list(prof.stacks)
    t_parts = [np.asarray(prof.sample_t_ns, np.int64)]
    th_parts = [np.asarray(prof.sample_thread, np.int64)]
    st_parts = [np.asarray(prof.sample_stack, np.int64)]
    wall_parts = [np.asarray(prof.sample_wall_ns, np.float64)]
    cpu_parts = [np.asarray(prof.sample_cpu_ns, np.float64)]
    names = dict(prof.thread_names)
    natives = dict(prof.native_ids)
    os_threads = {k: list(v) for k, v in prof.os_threads.items()}
    for k, part in enumerate(parts, 1):
        p = part.profile
        label = process_label(part.run)
        t = part.spans if isinstance(part.spans, SpanTable) else SpanTable.from_spans(part.spans)
        tids = np.unique(np.concatenate([np.asarray(t.thread, np.int64), np.asarray(p.sample_thread, np.int64),
                                         np.array(sorted(p.thread_names), np.int64)]))
        new = THREAD_BASE + (k << 16) + np.arange(len(tids), dtype=np.int64)
        old_to_new = dict(zip(tids.tolist(), new.tolist()))
        off = np.int64((part.run.process or {}).get("clock_offset_ns") or 0)  # (another host's clock: see the module)
        shift = np.int64(k) << SPAN_SHIFT
        parent = t.parent.copy()
        has = parent != NO_PARENT
        parent[has] += shift
        tables.append(SpanTable(t.id + shift, parent, t.name, t.names, t.op, t.ops, t.start - off, t.end - off,
                                _remap(np.asarray(t.thread, np.int64), tids, new), t.error, t.errors, t.attrs))
        base_f, base_s = len(frames), len(stacks)
        frames.extend(p.frames)
        stacks.extend(tuple(f + base_f for f in s) for s in p.stacks)
        t_parts.append(np.asarray(p.sample_t_ns, np.int64) - off)
        th_parts.append(_remap(np.asarray(p.sample_thread, np.int64), tids, new))
        st_parts.append(np.asarray(p.sample_stack, np.int64) + base_s)
        n = len(p.sample_t_ns)
        wall_parts.append(np.asarray(p.sample_wall_ns, np.float64) if len(p.sample_wall_ns) else np.full(n, np.nan))
        cpu_parts.append(np.asarray(p.sample_cpu_ns, np.float64) if len(p.sample_cpu_ns) else np.full(n, np.nan))
        for tid, new_id in old_to_new.items():
            names[new_id] = f"{label}{LABEL_SEP}{p.thread_names.get(tid, 'thread')}"
            if tid in p.native_ids:
                natives[new_id] = p.native_ids[tid]
            if tid in p.os_threads:
                os_threads[new_id] = list(p.os_threads[tid])
    t_all = np.concatenate(t_parts)
    order = np.argsort(t_all, kind="stable")
    joined = Profile(frames=frames, stacks=stacks, sample_t_ns=t_all[order],
                     sample_thread=np.concatenate(th_parts)[order], sample_stack=np.concatenate(st_parts)[order],
                     sample_wall_ns=np.concatenate(wall_parts)[order], sample_cpu_ns=np.concatenate(cpu_parts)[order],
                     hz=prof.hz, thread_names=names, native_ids=natives, os_threads=os_threads)
    run = top.run
    run.unresolved = job_unresolved(top.run, [p.run for p in parts])
    run.span_count = top.run.span_count + sum(p.run.span_count for p in parts)
    run.sample_count = len(t_all)
    data = RunData(run, concat(tables), joined)
    data.memory = join_memory([top.memory, *[p.memory for p in parts]])
    data.processes = [p.run for p in parts]
    return data


def join_memory(tracks: list[MemoryTrack]) -> MemoryTrack:
    """The memory lanes of a job's processes (process ``k`` is ``tracks[k]``) as one, in time order, each sample with
    its process (``MemoryTrack.process``)."""
    rows = sorted((t, k, i) for k, tr in enumerate(tracks) for i, t in enumerate(tr.t_ns))
    return MemoryTrack([r[0] for r in rows], [tracks[k].rss[i] for _, k, i in rows],
                       [tracks[k].cuda_allocated[i] for _, k, i in rows],
                       [tracks[k].cuda_reserved[i] for _, k, i in rows], [k for _, k, _ in rows])


def concat(tables: list[SpanTable]) -> SpanTable:
    """Span tables (ids already unique) as one, in ``(start, id)`` order; names, ops and errors re-coded."""
    names: dict[str, int] = {}
    ops: dict[str, int] = {}
    errors: dict[str, int] = {}
    cols: dict[str, list] = {k: [] for k in ("id", "parent", "name", "op", "start", "end", "thread", "error")}
    attrs: dict[int, dict] = {}
    n = 0
    for t in tables:
        name_map = np.array([names.setdefault(x, len(names)) for x in t.names] or [0], np.int32)
        op_map = np.array([ops.setdefault(x, len(ops)) for x in t.ops] or [0], np.int16)
        err_map = np.array([errors.setdefault(x, len(errors)) for x in t.errors] + [-1], np.int32)
        cols["id"].append(t.id)
        cols["parent"].append(t.parent)
        cols["name"].append(name_map[t.name] if len(t) else t.name)
        cols["op"].append(op_map[t.op] if len(t) else t.op)
        cols["start"].append(t.start)
        cols["end"].append(t.end)
        cols["thread"].append(np.asarray(t.thread, np.int64))
        cols["error"].append(err_map[t.error] if len(t) else t.error)  # (-1 -> the last entry: -1)
        for row, a in t.attrs.items():
            attrs[n + row] = a
        n += len(t)
    c = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((c["id"], c["start"]))
    back = np.empty(n, np.int64)
    back[order] = np.arange(n)
    attrs = {int(back[r]): a for r, a in attrs.items()}
    return SpanTable(c["id"][order], c["parent"][order], c["name"][order].astype(np.int32), list(names),
                     c["op"][order].astype(np.int16), list(ops), c["start"][order], c["end"][order],
                     c["thread"][order], c["error"][order].astype(np.int32), list(errors), attrs)
