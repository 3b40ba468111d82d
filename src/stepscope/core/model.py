"""The recorded model: runs, spans and sampled profiles. Names are the field's own.

The store's layout and version are in ``stepscope.store.schema``; times are ``perf_counter_ns`` readings
of the run's process (the one clock, see ``stepscope.core.clock``) unless a field says otherwise.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Span:
    """One traced call or manual span.

    ``start_ns``/``end_ns``: clock readings (ns). ``parent_id``: None at the top of a thread. ``op``:
    "transaction" for a root span, "function" for a traced function, or the user's op. ``status`` is
    "ok" or "error" (then ``error_type`` names the exception). ``attrs``: e.g. ``{"diffusion.step": 7}``.
    """

    span_id: int
    parent_id: int | None
    name: str
    op: str
    start_ns: int
    end_ns: int
    thread_id: int
    status: str = "ok"
    error_type: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(slots=True, frozen=True)
class Frame:
    """A stack frame: function (qualified name), module, file, and the line being executed (1-based)."""

    function: str
    module: str
    file: str
    line: int

    @property
    def label(self) -> str:
        """``module.function``, the name used in flame graphs and tables."""
        if self.module and not self.function.startswith(self.module):
            return f"{self.module}.{self.function}"
        return self.function


#: The file of an IPython cell's code: ipykernel's ``/tmp/ipykernel_PID/HASH.py``, a terminal IPython's
#: ``<ipython-input-N-HASH>``.
_CELL_FILE = re.compile(r"(?:ipykernel_\d+[/\\]\d+\.py|<ipython-input-\d+-[0-9a-f]+>)$")


def root_at_cells(frames: list["Frame"], stacks: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """``stacks`` (frame indices, root first) rooted at the innermost IPython cell frame they hold: the kernel's
    loop, IPython's ``run_cell`` and a cell magic above a cell's code say nothing about the program (as
    pyinstrument's ``%%pyinstrument`` shows a cell). Stacks without a cell frame are kept whole; a run outside
    IPython is returned as it is."""
    cells = {k for k, f in enumerate(frames) if f.function == "<module>" and _CELL_FILE.search(f.file or "")}
    if not cells:
        return stacks
    out = []
    for st in stacks:
        k = next((j for j in range(len(st) - 1, -1, -1) if st[j] in cells), 0)
        out.append(st[k:] if k else st)
    return out


@dataclass(slots=True)
class Profile:
    """A sampled profile (shape of Sentry's sampled profile v1 / speedscope's shared frames).

    ``stacks[i]`` is a tuple of indices into ``frames``, root first. Samples are three parallel lists:
    ``sample_t_ns`` (clock readings, ns), ``sample_thread`` (thread ids) and ``sample_stack`` (indices
    into ``stacks``), in time order. ``hz`` is the requested sampling rate (samples/s per thread).
    ``sample_wall_ns``/``sample_cpu_ns`` (parallel, may be empty or hold None): the wall time each sample stands
    for and the CPU time its thread used in it (ns); None where unknown (older runs, ingested profiles).
    """

    frames: list[Frame] = field(default_factory=list)
    stacks: list[tuple[int, ...]] = field(default_factory=list)
    sample_t_ns: list[int] = field(default_factory=list)
    sample_thread: list[int] = field(default_factory=list)
    sample_stack: list[int] = field(default_factory=list)
    hz: float = 0.0
    thread_names: dict[int, str] = field(default_factory=dict)
    native_ids: dict[int, int] = field(default_factory=dict)  # thread id -> OS thread id (Kineto's tid)
    #: thread id -> [(since_ns, OS thread id)], in time order: Python reuses a thread id after its thread exits
    os_threads: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    sample_wall_ns: list = field(default_factory=list)
    sample_cpu_ns: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sample_t_ns)

    def native_at(self, thread_id: int, t_ns: int) -> int | None:
        """The OS thread id that ``thread_id`` named at time ``t_ns`` (None when unknown)."""
        hist = self.os_threads.get(thread_id)
        if hist:
            best = hist[0][1]
            for since, native in hist:
                if since <= t_ns:
                    best = native
                else:
                    break
            return best
        return self.native_ids.get(thread_id)

    def all_native(self) -> dict[int, int]:
        """OS thread id -> thread id, over the whole run."""
        out = {v: k for k, v in self.native_ids.items()}
        for tid, hist in self.os_threads.items():
            for _, native in hist:
                out[native] = tid
        return out


@dataclass(slots=True)
class Run:
    """One profiled execution. ``start_ns``/``end_ns`` on the run's clock; ``anchor_*`` map it to wall time
    (``wall_ns = anchor_wall_ns + t - anchor_mono_ns``). ``status``: running, ok, error, interrupted,
    terminated, killed (by another signal: ``error`` names it; SIGKILL reads "SIGKILL (out of memory?)"), oom (the
    program ended by an out-of-memory error, or the kernel's OOM killer killed it: ``error`` says which), incomplete (the program ended, but its recording
    stopped at a failed write, e.g. a full disk: ``error`` says why, ``exit_code`` is the program's), lost (read only: "running", but its process is
    gone without a word, e.g. SIGKILLed with stepscope). ``unresolved``: traced names that could not be resolved -> reason."""

    id: str
    command: list[str]
    cwd: str = ""
    host: str = ""
    pid: int = 0
    status: str = "running"
    exit_code: int | None = None
    error: str | None = None
    start_ns: int = 0
    end_ns: int | None = None
    anchor_mono_ns: int = 0
    anchor_wall_ns: int = 0
    env: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    unresolved: dict[str, str] = field(default_factory=dict)
    sample_count: int = 0
    span_count: int = 0  # traced spans (the run's transactions not counted), as every command shows it
    #: the top run of the job this run is a process of (None: a top run); ``process``: ``ppid`` and, for a
    #: torch.distributed rank, ``rank``, ``local_rank``, ``world_size``, ``role`` (``stepscope.record.processes``)
    parent_run: str | None = None
    process: dict[str, Any] = field(default_factory=dict)

    @property
    def wall_time_ns(self) -> int | None:
        return None if self.end_ns is None else self.end_ns - self.start_ns

    def to_wall_ns(self, t_ns: int) -> int:
        return self.anchor_wall_ns + (t_ns - self.anchor_mono_ns)

    @property
    def meta(self) -> "RunMeta":
        """What the run is beside what it recorded (a capture window, a job, an auto-trace pass): ``RunMeta``."""
        return RunMeta.of(self.settings)


@dataclass(slots=True)
class MemoryTrack:
    """The memory lane of a run (``record.memory.history``): parallel lists in time order. ``t_ns``: clock readings;
    ``rss``: the process's resident set; ``cuda_allocated``/``cuda_reserved``: the CUDA caching allocator's
    bytes of the current device. Bytes; None where not read (CUDA before it was initialised, or no CUDA)."""

    t_ns: list[int] = field(default_factory=list)
    rss: list = field(default_factory=list)
    cuda_allocated: list = field(default_factory=list)
    cuda_reserved: list = field(default_factory=list)
    #: each sample's process in a job's joined run (``jobids``: 0 the top program); empty: all the run's own
    process: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.t_ns)


@dataclass(slots=True)
class RunData:
    """A run with everything recorded for it. ``memory``: its memory lane (empty for runs without one)."""

    run: Run
    spans: list[Span]
    profile: Profile
    memory: MemoryTrack = field(default_factory=MemoryTrack)
    #: the runs of the job's other processes, joined into ``spans`` and ``profile`` (``store.jobjoin``); [] for a
    #: run of one process
    processes: list[Run] = field(default_factory=list)


# -- the run's facts beside its settings ---------------------------------------------------------------------------
#
# Stored in the run's settings under "extra" (``Run.settings["extra"]``: the store's JSON as it always was); read
# here only (``RunMeta.of``, ``Run.meta``), written by ``RunMeta.to_extra`` / ``RunMeta.into``.


@dataclass(frozen=True, slots=True)
class Capture:
    """A window of a running program (``stepscope capture``): ``pid`` (the program's), and ``span``, ``steps``,
    ``duration_s`` as asked (a control server's window: ``record.control``; None where not asked), or ``method``
    ("py-spy": sampled from outside, ``program.pyspy``)."""

    pid: int | None = None
    span: str | None = None
    steps: int | None = None
    duration_s: float | None = None
    method: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As stored: ``{"pid", "method"}`` for py-spy's, else ``{"pid", "span", "steps", "duration_s"}``."""
        if self.method is not None:
            return {"pid": self.pid, "method": self.method}
        return {"pid": self.pid, "span": self.span, "steps": self.steps, "duration_s": self.duration_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Capture":
        """From the stored form (keys it does not know are ignored)."""
        return cls(d.get("pid"), d.get("span"), d.get("steps"), d.get("duration_s"), d.get("method"))


@dataclass(frozen=True, slots=True)
class AutoTrace:
    """A pass of ``stepscope run --auto-trace N``: ``pass_no`` (1: sampled, 2: with the suggestions traced),
    ``first_run`` (pass 2's: the sampled run), ``second_run`` (pass 1's, once pass 2 ran), ``added`` (the names the
    suggestions added; None until known)."""

    pass_no: int
    first_run: str | None = None
    second_run: str | None = None
    added: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """As stored: ``{"pass", "first_run"?, "second_run"?, "added"?}`` (the keys set)."""
        out: dict[str, Any] = {"pass": self.pass_no}
        if self.first_run is not None:
            out["first_run"] = self.first_run
        if self.second_run is not None:
            out["second_run"] = self.second_run
        if self.added is not None:
            out["added"] = list(self.added)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AutoTrace":
        """From the stored form."""
        added = d.get("added")
        return cls(d.get("pass", 0), d.get("first_run"), d.get("second_run"), list(added) if added is not None else None)


@dataclass(frozen=True, slots=True)
class RunMeta:
    """What a run is, beside what it recorded: ``capture`` (a capture window's facts, ``Capture``), ``job`` (``run
    --job``'s id, exported as ``stepscope.job.id``), ``auto_trace`` (an ``--auto-trace`` pass, ``AutoTrace``); None
    where the run has none."""

    capture: Capture | None = None
    job: str | None = None
    auto_trace: AutoTrace | None = None

    @classmethod
    def of(cls, settings: Any) -> "RunMeta":
        """The facts stored in a run's settings (``settings["extra"]``; anything not a dict reads as none): the one
        reader of that field."""
        extra = settings.get("extra") if isinstance(settings, dict) else None
        if not isinstance(extra, dict):
            return cls()
        cap, auto, job = extra.get("capture"), extra.get("auto_trace"), extra.get("job")
        return cls(Capture.from_dict(cap) if isinstance(cap, dict) and cap else None,
                   job if job else None,
                   AutoTrace.from_dict(auto) if isinstance(auto, dict) and auto else None)

    def to_extra(self) -> dict[str, Any]:
        """The facts as stored in ``settings["extra"]``: the keys set, in the order ``capture``, ``job``,
        ``auto_trace``."""
        out: dict[str, Any] = {}
        if self.capture is not None:
            out["capture"] = self.capture.to_dict()
        if self.job is not None:
            out["job"] = self.job
        if self.auto_trace is not None:
            out["auto_trace"] = self.auto_trace.to_dict()
        return out

    def into(self, settings: dict[str, Any]) -> dict[str, Any]:
        """``settings`` (a run's, as stored) with these facts written into its ``extra``, the others kept."""
        return {**settings, "extra": {**(settings.get("extra") or {}), **self.to_extra()}}
