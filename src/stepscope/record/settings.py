"""Recording settings: one frozen dataclass, validated once (stdlib only)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..core import limits

#: The sampling rate when none is given (samples/s per thread): ``Settings``, ``stepscope.init``, ``run``, ``demo``,
#: ``capture``. Not a round number, so as not to run in lockstep with periodic work (sentry-python's default too).
DEFAULT_HZ = 101.0


@dataclass(frozen=True, slots=True)
class Settings:
    """What a session records.

    ``functions_to_trace``: qualified names (globs allowed). ``profiles_hz``: samples per second per
    thread, 0 (sampling off) or 1 to 10000. ``max_stack_depth``: frames kept per sample, nearest the leaf
    (1 to 10000). ``flush_interval_s``: how often recorded data is written to the store (0.01 to 3600 s);
    a crash loses at most this.
    ``transaction``: name of the root transaction opened for the whole program (None: none).
    ``device_trace``: also record the torch profiler timeline (``device_stacks``: with Python stacks;
    ``device_steps``: only that many denoising steps after one warm-up step); it traces the host-device sync sites
    too (``tracing.syncs.SYNC_TARGETS``, added to ``functions_to_trace``), as ``syncs`` does without it. ``compile_report``: record
    torch.compile graph breaks and recompilations. ``sampler``: how the main thread is sampled: "auto" (a
    timer signal read inside the thread where the platform allows, ``profiling.signals``; else the sampler
    thread) or "thread" (always the sampler thread). ``memory``: the memory lane (RSS, and CUDA's allocator
    bytes once the program initialised CUDA) sampled at the profiling rate, and memory at the entry and exit of
    step-level spans (``profiling.memory``). ``cuda_peaks``: "safe" (never reset the allocator's peak counter)
    or "reset" (reset it at each step-level span: exact per-span peaks, but the program's own
    ``max_memory_allocated`` then reads since the last one). ``memory_history``: CUDA's allocator history with
    a bounded buffer, and its snapshot when the program runs out of memory. Raises ValueError naming the field
    and its range.
    """

    functions_to_trace: tuple[str, ...] = ()
    profiles_hz: float = DEFAULT_HZ
    max_stack_depth: int = 256
    flush_interval_s: float = 1.0
    transaction: str | None = None
    store: str | None = None
    device_trace: bool = False
    device_stacks: bool = False
    device_steps: int | None = None
    compile_report: bool = False
    sampler: str = "auto"
    memory: bool = True
    cuda_peaks: str = "safe"
    memory_history: bool = False
    #: record every Python process the program starts as a process of the run (``processes``; ``--no-children``)
    children: bool = True
    #: ``--step``: names (globs) each of whose calls is one denoising step (traced too; ``steps.hooks.StepMarker``)
    step_functions: tuple[str, ...] = ()
    #: ``--label``/``traces.toml``'s ``labels``: name (glob) -> template naming its spans from the arguments
    #: (``tracing.labels``)
    labels: dict[str, str] = field(default_factory=dict)
    #: ``--app``: the app preset whose names are traced (``apps``), or None
    app: str | None = None
    #: the sampler loops of ``steps.rules.LOOP_TRACES`` traced too (quietly) whenever anything is traced
    loop_rules: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    #: ``--syncs``: trace the host-device sync sites without a device trace (folded into ``functions_to_trace``; not
    #: stored: ``to_dict`` leaves it out)
    syncs: bool = False

    def __post_init__(self) -> None:
        """Check every number (``limits``: one line naming the field and its range). Raises ValueError."""
        object.__setattr__(self, "profiles_hz", limits.hz("profiles_hz", self.profiles_hz))
        limits.in_range("max_stack_depth", self.max_stack_depth, 1, 10_000, integer=True, unit=" frames")
        object.__setattr__(self, "flush_interval_s",
                           float(limits.in_range("flush_interval_s", self.flush_interval_s, 0.01, 3600, unit=" s")))
        if self.sampler not in ("auto", "thread"):
            raise ValueError(f"sampler: must be auto or thread, got {self.sampler!r}")
        if self.cuda_peaks not in ("safe", "reset"):
            raise ValueError(f"cuda_peaks: must be safe or reset, got {self.cuda_peaks!r}")
        if self.device_steps is not None:
            limits.in_range("device_steps", self.device_steps, 1, 1_000_000, integer=True)
        object.__setattr__(self, "step_functions", tuple(self.step_functions))
        if self.device_trace or self.syncs:  # (the one place where a device trace implies the sync sites)
            from .tracing.syncs import SYNC_TARGETS

            names = tuple(self.functions_to_trace)
            object.__setattr__(self, "functions_to_trace", names + tuple(t for t in SYNC_TARGETS if t not in names))
        if self.app is not None:
            from . import apps

            object.__setattr__(self, "app", apps.get(self.app).name)  # (ValueError: one line naming --app)
        if self.labels:
            from .spans.labels import parse_labels

            object.__setattr__(self, "labels", parse_labels(dict(self.labels), "labels"))

    def to_dict(self) -> dict[str, Any]:
        """The settings as stored in the run (``Run.settings``) and handed to the program's processes: JSON types,
        ``syncs`` left out (its names are in ``functions_to_trace``)."""
        d = asdict(self)
        del d["syncs"]
        d["functions_to_trace"] = list(self.functions_to_trace)
        d["step_functions"] = list(self.step_functions)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Settings":
        """Settings from ``to_dict``'s form (keys it does not know are ignored: a newer stepscope's). Raises ValueError
        as the constructor does."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for k in ("functions_to_trace", "step_functions"):
            if k in known:
                known[k] = tuple(known[k])
        return cls(**known)
