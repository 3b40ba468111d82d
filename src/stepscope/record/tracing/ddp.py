"""DDP's gradient all-reduce as spans: the collective that ``DistributedDataParallel``'s reducer launches from C++
inside ``backward`` (no Python function to trace), recovered from torch.distributed's flight recorder.

How (stdlib only; torch objects are only read, torch is never imported here):

- In a process that a torch.distributed launcher started (``RANK`` in its environment), ``enable_flight_recorder``
  sets ``TORCH_FR_BUFFER_SIZE`` (``FR_ENTRIES``) unless the program's environment already sizes the flight recorder
  (``TORCH_FR_BUFFER_SIZE`` or ``TORCH_NCCL_TRACE_BUFFER_SIZE``). The recorder (c10d's ``FlightRecorder``) keeps the
  last entries of every collective the process launched: its process group, sizes, dtypes, sequence number and the
  wall time it was created (``time_created_ns``, ns since the Unix epoch). Gloo does not record the end.
- Once the program imports ``torch.nn.parallel.distributed``, ``torch.autograd.graph._engine_run_backward`` (the
  one Python function every ``backward()`` and ``autograd.grad`` go through) is traced as a span of op ``backward``
  (``BackwardSite``).
- At each flush that holds finished ``backward`` spans, ``DdpJoin.spans_for`` reads the flight recorder (one
  ``_dump_fr_trace``, ~1-4 ms for ``FR_ENTRIES``) and, for each backward span, takes the ``all_reduce`` entries
  created on its thread inside it and outside any Python-level collective span (those are already spans:
  ``tracing.collectives``). These are the reducer's gradient buckets. It adds one child span, ``DDP_SPAN`` (op
  ``collective``), from the *last* bucket's launch to the end of backward: the reducer launches a bucket as soon as
  its gradients are ready and waits for all of them in ``finalize_backward``, at the end of backward; after the last
  launch the rank only waits, so the span is the exposed (not overlapped) communication, and for a rank that is
  ahead, its wait for the others. Attributes: ``collective.bytes`` (all buckets: numel x dtype size),
  ``collective.buckets``, ``collective.overlapped_ns`` (first to last launch: when the earlier buckets ran beside
  backward's compute), ``collective.group``, ``collective.group_size``, ``collective.seq`` (the last bucket's
  sequence number in its group: the same on every rank).

Not with ``--device-trace``: the profiler records the collectives themselves (``record_param_comms``, the backend's
ops), and reading the flight recorder while the profiler ran made a 2-rank gloo DDP job hang at its end in about a
third of the runs here (its process group, freed with the DDP model, joining a gloo worker that waited for the GIL;
torch 2.13); without the profiler, no hang in the runs made (torchrun, gloo, CPU).

Entries the ring dropped before a flush (more than ``FR_ENTRIES`` collectives in one flush interval) are counted in
``DdpJoin.missed``. Source of the entry layout: torch/csrc/distributed/c10d/FlightRecorder.hpp (``Entry``) and
``torch._C._distributed_c10d._dump_fr_trace`` (a pickled dict: ``entries``, ``pg_config``).
"""

from __future__ import annotations

import os
import pickle
import sys
import time

#: the module whose import tells that the program uses DDP
DDP_MODULE = "torch.nn.parallel.distributed"
#: the Python function every backward goes through (torch/autograd/graph.py)
BACKWARD = "torch.autograd.graph._engine_run_backward"
#: the span name of a backward's gradient all-reduce
DDP_SPAN = "DistributedDataParallel.gradient_all_reduce"
#: flight-recorder entries kept by a rank when the program does not size it itself
FR_ENTRIES = 1024
FR_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")

#: bytes of an element, by the flight recorder's dtype name (c10's ScalarType names)
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4,
               "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "UInt16": 2,
               "UInt32": 4, "UInt64": 8}


def enable_flight_recorder(environ=os.environ) -> bool:
    """Size c10d's flight recorder (``FR_ENTRIES``) in a rank (``RANK`` set) whose environment does not already; must
    run before the program creates its process group. Returns True when it set the variable."""
    if "RANK" not in environ or any(v in environ for v in FR_VARS):
        return False
    environ[FR_VARS[0]] = str(FR_ENTRIES)
    return True


class BackwardSite:
    """Probe hooks of ``BACKWARD``: a span of op ``backward``, no attributes."""

    __slots__ = ()
    op = "backward"

    def enter_frame(self, frame) -> None:
        return None

    def enter(self, args: tuple, kwargs: dict) -> None:
        return None

    def exit(self) -> None:
        return None


def hooks_for(owner: object, attr: str) -> BackwardSite | None:
    """Hooks for ``torch.autograd.graph._engine_run_backward``, else None."""
    if attr == "_engine_run_backward" and getattr(owner, "__name__", None) == "torch.autograd.graph":
        return BackwardSite()
    return None


def entry_bytes(entry: dict) -> int:
    """Bytes an entry's input tensors hold (numel x dtype size, summed; 0 for unknown dtypes)."""
    total = 0
    for shape, dtype in zip(entry.get("input_sizes") or (), entry.get("input_dtypes") or ()):
        n = 1
        for d in shape:
            n *= int(d)
        total += n * DTYPE_BYTES.get(str(dtype), 0)
    return total


def read_entries() -> tuple[list[dict], dict]:
    """The flight recorder's entries and process-group configs (``([], {})`` when torch.distributed is not loaded or
    the dump fails). Never imports torch."""
    c10d = sys.modules.get("torch._C._distributed_c10d")
    dump = getattr(c10d, "_dump_fr_trace", None)
    if dump is None:
        return [], {}
    try:
        d = pickle.loads(dump(includeCollectives=True, includeStackTraces=False))
    except Exception:
        return [], {}
    return list(d.get("entries") or ()), dict(d.get("pg_config") or {})


def _group(entry: dict, configs: dict) -> tuple[str, int | None]:
    """(group name, size) of an entry: ``WORLD`` for the default group."""
    pg = entry.get("process_group") or ("", "")
    name, desc = (str(pg[0]), str(pg[1])) if len(pg) == 2 else (str(pg), "")
    size = None
    cfg = configs.get(name) or configs.get(desc)
    if cfg is None and len(configs) == 1:  # (the default group's config may be keyed by an empty name)
        cfg = next(iter(configs.values()))
    if isinstance(cfg, dict):
        ranks = cfg.get("ranks")
        try:
            size = len(ranks) if isinstance(ranks, (list, tuple)) else len(str(ranks).strip("[]").split(","))
        except Exception:
            size = None
    return ("WORLD" if desc == "default_pg" else (desc or name)), size


def wall_to_mono(tries: int = 7) -> int:
    """``perf_counter_ns() - time_ns()`` now (ns), from the tightest of ``tries`` bracketed readings: a reading
    preempted between its clock reads (a loaded machine) is off by as long as it was preempted, and a bucket's launch
    is often under a millisecond before backward's end."""
    best = None
    for _ in range(tries):
        m0 = time.perf_counter_ns()
        w = time.time_ns()
        m1 = time.perf_counter_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, (m0 + m1) // 2 - w)
    return best[1]


class DdpJoin:
    """Adds DDP's gradient all-reduce spans to a flush's spans (see the module). Flight-recorder wall times are put on
    perf_counter_ns by ``wall_to_mono`` at each read; ``next_id``: the span id source."""

    def __init__(self, next_id) -> None:
        self.next_id = next_id
        self.last_record = -1
        self.missed = 0

    def spans_for(self, spans: list[tuple], read=read_entries, shift: int | None = None) -> list[tuple]:
        """New span tuples (``tracing.buffer.SPAN_FIELDS``) for the ``backward`` spans among ``spans``. ``read``:
        the flight recorder's ``(entries, pg_config)``; ``shift``: perf_counter ns minus wall ns (default: read now,
        ``wall_to_mono``)."""
        backs = [s for s in spans if s[3] == "backward"]
        if not backs:
            return []
        entries, configs = read()
        if not entries:
            return []
        first = min(int(e.get("record_id", 0)) for e in entries)
        if self.last_record >= 0 and first > self.last_record + 1:
            self.missed += first - self.last_record - 1
        self.last_record = max(self.last_record, max(int(e.get("record_id", 0)) for e in entries))
        colls = [(s[6], s[4], s[5]) for s in spans if s[3] == "collective"]
        shift = wall_to_mono() if shift is None else shift
        to_mono = lambda wall: wall + shift  # noqa: E731
        out: list[tuple] = []
        for b in backs:
            sid, thread, t0, t1 = b[0], b[6], b[4], b[5]
            mine = []
            for e in entries:
                if not str(e.get("profiling_name", "")).endswith("all_reduce") or str(e.get("thread_id")) != str(thread):
                    continue
                t = to_mono(int(e.get("time_created_ns") or 0))
                if t0 <= t <= t1 and not any(th == thread and c0 <= t <= c1 for th, c0, c1 in colls):
                    mine.append((t, e))
            if not mine:
                continue
            mine.sort(key=lambda p: p[0])
            last_t, last = mine[-1]
            group, size = _group(last, configs)
            attrs = {"collective.bytes": sum(entry_bytes(e) for _, e in mine), "collective.buckets": len(mine),
                     "collective.overlapped_ns": last_t - mine[0][0], "collective.group": group,
                     "collective.seq": int(last.get("collective_seq_id") or 0)}
            if size is not None:
                attrs["collective.group_size"] = size
            out.append((self.next_id(), sid, DDP_SPAN, "collective", last_t, t1, thread, None, attrs))
        return out
