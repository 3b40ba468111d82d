"""Recording settings: one frozen dataclass, each field declared once with its rule and its help (stdlib only).

Each field's ``metadata`` says what the CLI needs to set it (``FieldInfo``): ``help`` (the option's help text),
``flags`` (the option's declarations, e.g. ``("--memory/--no-memory",)``; none: not a CLI option), ``check`` (its
rule: ``check(label, value) -> value`` as held, raising ValueError ``"LABEL: must be ..."``; ``core.limits``' one
message form) and ``stored`` (False: left out of ``to_dict``). ``Settings`` checks every field under its name
(``profiles_hz: must be ...``); ``check_flags`` checks the values that the CLI got under their flags (``--hz: must
be ...``), by the same rule, before the program runs. ``cli.common.setting_option`` makes a field's option.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Callable, NamedTuple

from ..core import limits

#: The sampling rate when none is given (samples/s per thread): ``Settings``, ``stepscope.init``, ``run``, ``demo``,
#: ``capture``. Not a round number, so as not to run in lockstep with periodic work (sentry-python's default too).
DEFAULT_HZ = 101.0


class FieldInfo(NamedTuple):
    """A field's declaration for the CLI and the checks (see the module): ``help``, ``flags``, ``check``,
    ``stored``."""

    help: str = ""
    flags: tuple[str, ...] = ()
    check: Callable[[str, Any], Any] | None = None
    stored: bool = True

    @property
    def flag(self) -> str | None:
        """The flag that names the field in a message (``--memory`` of ``--memory/--no-memory``), or None."""
        return self.flags[0].split("/")[0] if self.flags else None


def _setting(default: Any = MISSING, *, help: str = "", flags: tuple[str, ...] = (), check=None, stored: bool = True,
             factory: Callable[[], Any] | None = None) -> Any:
    """A dataclass field with its ``FieldInfo`` as metadata."""
    info = {"setting": FieldInfo(help, flags, check, stored)}
    if factory is not None:
        return field(default_factory=factory, metadata=info)
    return field(default=default, metadata=info)


def _choice(*allowed: str):
    """The rule of a field that is one of ``allowed``: ``LABEL: must be a or b, got 'x'``."""
    def check(label: str, value: Any) -> Any:
        if value not in allowed:
            raise ValueError(f"{label}: must be {' or '.join(allowed)}, got {value!r}")
        return value
    return check


def _hz(label: str, value: Any) -> float:
    return limits.hz(label, value)


def _stack_depth(label: str, value: Any) -> int:
    return limits.in_range(label, value, 1, 10_000, integer=True, unit=" frames")


def _flush_interval(label: str, value: Any) -> float:
    return float(limits.in_range(label, value, 0.01, 3600, unit=" s"))


def _budget(label: str, value: Any) -> float:
    return float(limits.in_range(label, value, 0.0001, 1.0))


def _device_steps(label: str, value: Any) -> int | None:
    return None if value is None else limits.in_range(label, value, 1, 1_000_000, integer=True)


def _names(label: str, value: Any) -> tuple[str, ...]:
    return tuple(value)


def _labels(label: str, value: Any) -> dict[str, str]:
    """``{name: template}`` or ``NAME=TEMPLATE`` strings (``--label``), each template checked (``spans.labels``)."""
    if not value:
        return {}
    from .spans.labels import parse_labels

    return parse_labels(dict(value) if isinstance(value, dict) else list(value), label)


def _app(label: str, value: Any) -> str | None:
    """A preset's name as ``apps`` spells it (ValueError: one line naming ``--app``), or None."""
    if value is None:
        return None
    from . import apps

    return apps.get(value).name


@dataclass(frozen=True, slots=True)
class Settings:
    """What a session records; each field's help says what it is (``FieldInfo``), its rule is checked at
    construction. Raises ValueError naming the field and its range (``profiles_hz: must be 0 (off) or between
    0.01 and 10000, got 1e-12``).

    A device trace traces the host-device sync sites too (``tracing.syncs.SYNC_TARGETS``, added to
    ``functions_to_trace``), as ``syncs`` does without one; ``device_steps`` implies ``device_trace``.
    """

    functions_to_trace: tuple[str, ...] = _setting(
        (), flags=("--trace", "-t"), check=_names,
        help="Qualified name to trace (repeatable; globs allowed).")
    #: samples per second per thread (0: sampling off)
    profiles_hz: float = _setting(DEFAULT_HZ, flags=("--hz",), check=_hz,
                                  help="Sampling rate per thread, samples/s: 0 (off) or 0.01-10000.")
    max_stack_depth: int = _setting(256, check=_stack_depth, help="Frames kept per sample, nearest the leaf.")
    flush_interval_s: float = _setting(1.0, check=_flush_interval,
                                       help="How often recorded data is written to the store, s: a crash loses at "
                                            "most this.")
    transaction: str | None = _setting(None, help="Name of the root transaction opened for the whole program "
                                                  "(None: none).")
    store: str | None = _setting(None, help="The store folder (default: $STEPSCOPE_STORE or ./.stepscope).")
    device_trace: bool = _setting(False, flags=("--device-trace",),
                                  help="Also record the torch profiler (Kineto) timeline.")
    device_stacks: bool = _setting(False, flags=("--device-stacks",), help="Python stacks in the device trace (large).")
    device_steps: int | None = _setting(None, flags=("--device-steps",), check=_device_steps,
                                        help="Record only N denoising steps (after 1 warm-up).")
    compile_report: bool = _setting(False, flags=("--compile-report",),
                                    help="Record torch.compile graph breaks and recompilations.")
    sampler: str = _setting("auto", flags=("--sampler",), check=_choice("auto", "thread"),
                            help="How the main thread is sampled: auto (a timer signal read inside it, Linux; else a "
                                 "sampler thread) or thread (a sampler thread only).")
    memory: bool = _setting(True, flags=("--memory/--no-memory",),
                            help="The memory lane: RSS (and CUDA's allocated and reserved bytes) at the sampling rate, "
                                 "memory at step-level spans' entry and exit.")
    cuda_peaks: str = _setting("safe", flags=("--cuda-peaks",), check=_choice("safe", "reset"),
                               help="CUDA per-span peaks: safe (never reset the allocator's peak counter) or reset "
                                    "(exact per step-level span; the program's own max_memory_allocated then reads "
                                    "since the last one).")
    memory_history: bool = _setting(False, flags=("--memory-history",),
                                    help="CUDA: record the allocator's history (bounded) and keep its snapshot when "
                                         "the program runs out of memory.")
    children: bool = _setting(True, flags=("--children/--no-children",),
                              help="Record every Python process the program starts (subprocess, multiprocessing, "
                                   "torchrun/accelerate workers, DataLoader workers) as a process of the run.")
    step_functions: tuple[str, ...] = _setting(
        (), flags=("--step",), check=_names,
        help="A function each of whose calls is one denoising step, for a loop no built-in rule knows (repeatable; "
             "traced too). Built in: diffusers, k-diffusion, ComfyUI, ldm and sgm samplers (docs/steps.md).")
    labels: dict[str, str] = _setting(
        flags=("--label",), check=_labels, factory=dict,
        help="NAME=TEMPLATE: name NAME's spans from its arguments, e.g. "
             "'execution.execute={dynprompt.original_prompt[current_item][\"class_type\"]} #{current_item}' "
             "(attribute and item access and `or` only; repeatable; docs/steps.md).")
    app: str | None = _setting(None, flags=("--app",), check=_app,
                               help="Trace an app with its preset: diffusers, comfyui (a span per prompt and per node, "
                                    "by type and id) or invokeai.")
    overhead_budget: float = _setting(0.01, check=_budget,
                                      help="The share of the process's CPU that reading other threads' stacks may "
                                           "take (0.0001 to 1): above it their sampling rate is lowered, the main "
                                           "thread's kept.")
    loop_rules: bool = _setting(True, help="The sampler loops of steps.rules.LOOP_TRACES traced too (quietly) "
                                           "whenever anything is traced.")
    #: the run's facts beside the settings (a capture window's, a job id, auto-trace's passes: ``core.model.RunMeta``)
    extra: dict[str, Any] = _setting(factory=dict, help="The run's facts: capture, job, auto_trace (core.model.RunMeta).")
    syncs: bool = _setting(False, flags=("--syncs",), stored=False,
                           help="Trace host-device sync sites (.item(), .nonzero()...) with their line.")

    def __post_init__(self) -> None:
        """Check every field by its rule (``FieldInfo.check``) under its name, then fold ``syncs`` and
        ``device_steps`` in. Raises ValueError."""
        for f in fields(self):
            check = f.metadata["setting"].check
            if check is not None:
                object.__setattr__(self, f.name, check(f.name, getattr(self, f.name)))
        if self.device_steps is not None:
            object.__setattr__(self, "device_trace", True)
        if self.device_trace or self.syncs:  # (the one place where a device trace implies the sync sites)
            from .tracing.syncs import SYNC_TARGETS

            names = self.functions_to_trace
            object.__setattr__(self, "functions_to_trace", names + tuple(t for t in SYNC_TARGETS if t not in names))

    def to_dict(self) -> dict[str, Any]:
        """The settings as stored in the run (``Run.settings``) and handed to the program's processes: JSON types,
        in field order, without the fields not stored (``syncs``: its names are in ``functions_to_trace``)."""
        d = asdict(self)
        for f in fields(self):
            if not f.metadata["setting"].stored:
                del d[f.name]
        d["functions_to_trace"] = list(self.functions_to_trace)
        d["step_functions"] = list(self.step_functions)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Settings":
        """Settings from ``to_dict``'s form (keys it does not know are ignored: a newer stepscope's). Raises ValueError
        as the constructor does."""
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def field_info(name: str) -> FieldInfo:
    """The declaration of the ``Settings`` field ``name`` (its help, flags, rule). Raises KeyError for no such
    field."""
    return Settings.__dataclass_fields__[name].metadata["setting"]


def check_field(name: str, value: Any, label: str | None = None) -> Any:
    """``value`` checked by the rule of the ``Settings`` field ``name`` under ``label`` (default: the field's name),
    as the field would hold it. Raises ValueError (``LABEL: must be ...``), KeyError for no such field."""
    check = field_info(name).check
    return check(label or name, value) if check is not None else value


def check_flags(**values: Any) -> dict[str, Any]:
    """The values the CLI got for ``Settings`` fields (``profiles_hz=...``; None: not given, left out), each checked
    by its field's rule under its flag, in the order given (``--hz: must be 0 (off) or between 0.01 and 10000, got
    99999``): what the settings would hold. Raises ValueError (the first one out of its range)."""
    return {name: check_field(name, value, field_info(name).flag) for name, value in values.items() if value is not None}
