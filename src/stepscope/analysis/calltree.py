"""Call trees from samples: for a whole run, a thread, or any time window (one span, one step).

Samples are weighted by time: a sample stands for the interval since the previous sample of the same
thread. Samples recorded by stepscope carry that interval (``wall_ns``) and the CPU time the thread used in it
(``cpu_ns``), as the sampler computed them (``stepscope.record.sampling.sampler``: uncapped for the main thread's
timer-signal samples, capped at a few periods for the sampler thread's). Samples without them (runs of
stepscope before schema 3, ingested Sentry profiles) are weighted by the gap to the thread's previous sample,
capped at ``MAX_PERIODS`` nominal periods (and ``MAX_INTERVAL_NS``): a long gap is the recorder's own pause
and would otherwise be charged whole to whatever runs at the next sample; a thread's first sample gets the
nominal period. ``weight`` is wall time, ``cpu`` CPU time (NaN: unknown); the flame graph shows either.
Frames are merged by *function* (qualified name + file), the way flame graphs are read; the frame table keeps
the lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.jobids import LABEL_SEP

from ..core.model import Profile

MAX_INTERVAL_NS = 1_000_000_000
MAX_PERIODS = 3

#: Leaf functions that mean "this thread is waiting" (py-spy tells idle threads by OS state; a sampler
#: inside the process can only tell by the Python leaf frame).
IDLE_LEAVES = frozenset({
    "threading.Condition.wait", "threading.Event.wait", "threading.Thread.join", "threading.Thread._wait_for_tstate_lock",
    "threading.Semaphore.acquire", "threading.Barrier.wait", "queue.Queue.get", "queue.SimpleQueue.get",
    "selectors.EpollSelector.select", "selectors.PollSelector.select", "selectors.SelectSelector.select",
    "selectors.KqueueSelector.select", "selectors.DevpollSelector.select", "socket.socket.accept",
    "socketserver.BaseServer.serve_forever", "multiprocessing.connection._poll", "subprocess.Popen._wait",
    "concurrent.futures.thread._worker",
})


#: A sample whose thread used less CPU time than this share of its wall interval is idle (the thread was
#: waiting: a sleep, a lock, a queue, I/O, the event loop's select, a device sync that blocks), whatever
#: Python line it was on, C waits included: py-spy's default view, which leaves out threads not running.
IDLE_CPU_SHARE = 0.1


def idle_mask(t, thread, weight, cpu, stack, stack_funcs, functions) -> np.ndarray:
    """Per sample: True when its thread was waiting. Shapes: ``(N,)`` each (``t`` ns, sorted; ``thread`` ids;
    ``weight``/``cpu``: wall and CPU ns, NaN CPU where unknown); ``stack``: stack ids into ``stack_funcs`` (tuples
    of function ids into ``functions``).

    - A sample that carries both times (the sampler thread's: the CPU time its thread used in the sample's wall
      interval): idle when that CPU time is under ``IDLE_CPU_SHARE`` of the interval, or its leaf frame is a wait
      (``IDLE_LEAVES``: waiting now, whatever ran earlier in the interval ran in another stack).
    - The main thread sampled by timer signals (``record.sampling.signals``) has two kinds of samples: wall ticks (wall
      time, no CPU time) and CPU ticks (CPU time, no wall time: a tick comes after each CPU period the thread
      ran). A wall tick is idle when no CPU tick of its thread falls within one CPU period of it (the thread did
      not run around it; within 2 ms for a sample charged several periods: a C call's CPU tick comes in the same
      burst, a wait's does not), or its leaf frame is a wait (``IDLE_LEAVES``: the event loop's select between two
      requests). CPU ticks are never idle.
    - Unknown CPU time (older runs, ingested profiles): idle when the leaf frame is a wait (``IDLE_LEAVES``).
    """
    n = len(t)
    if not n:
        return np.zeros(0, bool)
    leaf = np.array([bool(s) and functions[s[-1]].name in IDLE_LEAVES for s in stack_funcs] or [False])[stack]
    out = leaf.copy()
    known = ~np.isnan(cpu)
    both = known & (weight > 0) & (cpu > 0)
    out[both] = (cpu[both] < IDLE_CPU_SHARE * weight[both]) | leaf[both]  # (waiting now: what ran was elsewhere)
    ticks = known & (weight <= 0) & (cpu > 0)
    out[ticks] = False
    walls = known & (weight > 0) & (cpu <= 0)  # (no CPU time in the sample's interval, or a wall tick)
    if walls.any():
        for tid in np.unique(thread[walls]).tolist():
            mine = thread == tid
            w = np.flatnonzero(walls & mine)
            tk = np.flatnonzero(ticks & mine)
            if not len(tk):  # the sampler thread's samples, or a thread that never ran a CPU period
                out[w] = True
                continue
            tt = t[tk]
            reach = float(np.median(cpu[tk]))
            j = np.searchsorted(tt, t[w])
            before = np.where(j > 0, t[w] - tt[np.maximum(j - 1, 0)], np.inf)
            after = np.where(j < len(tt), tt[np.minimum(j, len(tt) - 1)] - t[w], np.inf)
            dist = np.minimum(before, after)
            # a wall sample charged several periods is a long stretch in one place: a C call holding the thread
            # (its CPU tick is handled in the same burst, within ~2 ms) or a wait (the recorder's rows of a resting
            # main thread): busy only with a CPU tick right at it
            big = weight[w] > 2.5 * float(np.median(weight[w]))
            out[w] = np.where(big, dist > 2_000_000, dist > reach) | leaf[w]
    return out


@dataclass(slots=True)
class Function:
    """A function as flame graphs show it: ``name`` (module.qualname), ``file``, first ``line`` seen (0, "no line",
    only when no sample saw it on a line: Python 3.11's instrumented code runs the probe calls on none)."""

    name: str
    file: str
    line: int
    module: str = ""


@dataclass(slots=True)
class CallNode:
    """A node of a call tree. ``total_ns``/``self_ns``: sampled time (ns) in this path / at its leaf."""

    function: int  # index into ProfileIndex.functions; -1 for the root, -2 - tid for a thread root
    name: str
    total_ns: float = 0.0
    self_ns: float = 0.0
    samples: int = 0
    children: dict[int, "CallNode"] = field(default_factory=dict)

    def child(self, fid: int, name: str) -> "CallNode":
        c = self.children.get(fid)
        if c is None:
            c = self.children[fid] = CallNode(fid, name)
        return c

    def sorted_children(self) -> list["CallNode"]:
        return sorted(self.children.values(), key=lambda n: -n.total_ns)

    def to_dict(self) -> dict:
        """``{"name", "total_ns", "self_ns", "samples", "children": [...]}``, children widest first."""
        return {"name": self.name, "total_ns": self.total_ns, "self_ns": self.self_ns, "samples": self.samples,
                "children": [c.to_dict() for c in self.sorted_children()]}


class ProfileIndex:
    """Columnar, time-sorted view of a Profile for fast window queries.

    ``t``: int64 ns; ``thread``: int64; ``stack``: int64 stack indices; ``weight``: float64 wall ns per sample;
    ``cpu``: float64 CPU ns per sample (NaN where unknown; ``has_cpu`` tells whether any is known);
    ``stack_funcs[i]``: the stack as a tuple of function ids, root first.
    """

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        t = np.asarray(profile.sample_t_ns, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        self.t = t[order]
        self.thread = np.asarray(profile.sample_thread, dtype=np.int64)[order]
        self.stack = np.asarray(profile.sample_stack, dtype=np.int64)[order]
        period = 1e9 / profile.hz if profile.hz else 1e7
        cap = min(MAX_INTERVAL_NS, MAX_PERIODS * period)
        self.weight = np.full(len(self.t), period, dtype=np.float64)
        for tid in np.unique(self.thread):
            idx = np.nonzero(self.thread == tid)[0]
            if len(idx) > 1:
                d = np.diff(self.t[idx]).astype(np.float64)
                self.weight[idx[1:]] = np.minimum(d, cap)
        n = len(self.t)
        self.cpu = np.full(n, np.nan)
        if len(profile.sample_wall_ns) == n and n:
            stored = np.array(profile.sample_wall_ns, dtype=np.float64)[order]  # None -> NaN
            known = ~np.isnan(stored)
            self.weight[known] = stored[known]
        if len(profile.sample_cpu_ns) == n and n:
            self.cpu = np.array(profile.sample_cpu_ns, dtype=np.float64)[order]
        #: True when CPU time is known for some samples (the flame graph can show CPU time)
        self.has_cpu = bool(n) and not np.isnan(self.cpu).all()
        self.functions: list[Function] = []
        fid_of: dict[tuple, int] = {}
        self.frame_func = np.empty(len(profile.frames), dtype=np.int64)
        for i, fr in enumerate(profile.frames):
            key = (fr.function, fr.file)
            fid = fid_of.get(key)
            if fid is None:
                fid = fid_of[key] = len(self.functions)
                self.functions.append(Function(fr.label, fr.file, fr.line, fr.module))
            elif not self.functions[fid].line and fr.line:
                self.functions[fid].line = fr.line
            self.frame_func[i] = fid
        ff = self.frame_func
        self.stack_funcs = [tuple(int(ff[i]) for i in s) for s in profile.stacks]
        # (each process's main thread in a job's joined run: "rank 1 (pid 42) · MainThread", ``store.jobjoin``)
        main = [tid for tid, name in profile.thread_names.items() if name.rpartition(LABEL_SEP)[2] == "MainThread"]
        #: True for the samples of the main thread
        self.main = np.isin(self.thread, main) if len(self.t) else np.zeros(0, bool)
        #: True for the samples of a waiting thread (``idle_mask``), any thread, the main one too
        self.idle = idle_mask(self.t, self.thread, self.weight, self.cpu, self.stack, self.stack_funcs, self.functions)

    def __len__(self) -> int:
        return len(self.t)

    def busy(self) -> np.ndarray:
        """Indices of all samples but the idle ones (see ``idle``, ``idle_mask``): the running time that the top
        tables, ``suggest`` and the first screen rank."""
        return np.nonzero(~self.idle)[0]

    def select(self, start_ns: int | None = None, end_ns: int | None = None, thread: int | None = None) -> np.ndarray:
        """Indices of samples with ``start_ns <= t < end_ns`` (None: unbounded) on ``thread`` (None: all)."""
        lo = 0 if start_ns is None else int(np.searchsorted(self.t, start_ns, "left"))
        hi = len(self.t) if end_ns is None else int(np.searchsorted(self.t, end_ns, "left"))
        idx = np.arange(lo, hi)
        if thread is not None:
            idx = idx[self.thread[lo:hi] == thread]
        return idx

    def select_many(self, starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``select`` for many windows at once (shape ``(W,)`` each: ns, ns, thread id): ``(idx, win)``, one entry
        per (sample, window holding it), grouped by window in window order and ascending within one; ``win`` is
        the window's position. Memory: the number of such pairs (a sample in k nested windows counts k times)."""
        starts, ends, threads = (np.asarray(x, dtype=np.int64) for x in (starts, ends, threads))
        lo = np.zeros(len(starts), np.int64)
        hi = np.zeros(len(starts), np.int64)
        pos = np.zeros(0, np.int64)  # per thread: its samples' indices, concatenated; lo/hi index into it
        base = 0
        parts = []
        for tid in np.unique(threads).tolist():
            mine = np.flatnonzero(self.thread == tid)
            w = np.flatnonzero(threads == tid)
            tt = self.t[mine]
            lo[w] = base + np.searchsorted(tt, starts[w], "left")
            hi[w] = base + np.maximum(np.searchsorted(tt, ends[w], "left"), lo[w] - base)
            parts.append(mine)
            base += len(mine)
        if parts:
            pos = np.concatenate(parts)
        counts = hi - lo
        total = int(counts.sum())
        win = np.repeat(np.arange(len(starts), dtype=np.int64), counts)
        first = np.repeat(lo - (np.cumsum(counts) - counts), counts)  # each pair's offset, rebased per window
        return pos[first + np.arange(total, dtype=np.int64)], win

    def weights(self, mode: str = "wall") -> np.ndarray:
        """Per-sample ns: ``"wall"`` (wall time) or ``"cpu"`` (CPU time; unknown counts 0). Raises ValueError."""
        if mode == "wall":
            return self.weight
        if mode == "cpu":
            cpu = getattr(self, "_cpu0", None)
            if cpu is None:
                cpu = self._cpu0 = np.nan_to_num(self.cpu, nan=0.0)
            return cpu
        raise ValueError(f"mode: must be wall or cpu, got {mode!r}")

    def stack_weights(self, idx: np.ndarray, mode: str = "wall") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(stack ids, summed weight ns, sample counts)`` over the samples ``idx`` (``mode``: see ``weights``)."""
        if len(idx) == 0:
            e = np.empty(0)
            return e.astype(np.int64), e, e.astype(np.int64)
        stacks = self.stack[idx]
        uniq, inv, counts = np.unique(stacks, return_inverse=True, return_counts=True)
        w = np.bincount(inv, weights=self.weights(mode)[idx], minlength=len(uniq))
        return uniq, w, counts

    def tree(self, idx: np.ndarray, thread_roots: bool = False, root_name: str = "all", mode: str = "wall") -> CallNode:
        """The call tree of the samples ``idx`` (root first); with ``thread_roots`` one child per thread;
        ``mode``: wall or CPU time (``weights``)."""
        root = CallNode(-1, root_name)
        if thread_roots:
            names = self.profile.thread_names
            for tid in np.unique(self.thread[idx]):
                sub = idx[self.thread[idx] == tid]
                node = root.child(-2 - int(tid), f"thread {names.get(int(tid), tid)}")
                self._fill(node, sub, mode)
                root.total_ns += node.total_ns
                root.samples += node.samples
            return root
        self._fill(root, idx, mode)
        return root

    def _fill(self, root: CallNode, idx: np.ndarray, mode: str = "wall") -> None:
        funcs = self.functions
        uniq, w, counts = self.stack_weights(idx, mode)
        for sid, weight, n in zip(uniq.tolist(), w.tolist(), counts.tolist()):
            node = root
            node.total_ns += weight
            node.samples += n
            for fid in self.stack_funcs[sid]:
                node = node.child(fid, funcs[fid].name)
                node.total_ns += weight
                node.samples += n
            node.self_ns += weight

    def function_times(self, idx: np.ndarray, mode: str = "wall") -> tuple[np.ndarray, np.ndarray]:
        """Per function id: ``(self_ns, total_ns)`` over samples ``idx`` (a function counts once per sample)."""
        nf = len(self.functions)
        self_ns = np.zeros(nf)
        total_ns = np.zeros(nf)
        uniq, w, _ = self.stack_weights(idx, mode)
        for sid, weight in zip(uniq.tolist(), w.tolist()):
            fs = self.stack_funcs[sid]
            if not fs:
                continue
            self_ns[fs[-1]] += weight
            for fid in set(fs):
                total_ns[fid] += weight
        return self_ns, total_ns
