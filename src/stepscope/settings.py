"""Recording settings: one frozen dataclass, validated once (stdlib only)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Settings:
    """What a session records.

    ``functions_to_trace``: qualified names (globs allowed). ``profiles_hz``: samples per second per
    thread (0 turns sampling off). ``max_stack_depth``: frames kept per sample, nearest the leaf.
    ``flush_interval_s``: how often recorded data is written to the store (s); a crash loses at most this.
    ``transaction``: name of the root transaction opened for the whole program (None: none).
    ``device_trace``: also record the torch profiler timeline (``device_stacks``: with Python stacks;
    ``device_steps``: only that many denoising steps after one warm-up step). ``compile_report``: record
    torch.compile graph breaks and recompilations.
    """

    functions_to_trace: tuple[str, ...] = ()
    profiles_hz: float = 101.0
    max_stack_depth: int = 256
    flush_interval_s: float = 1.0
    transaction: str | None = None
    store: str | None = None
    device_trace: bool = False
    device_stacks: bool = False
    device_steps: int | None = None
    compile_report: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (0 <= self.profiles_hz <= 20000):
            raise ValueError(f"profiles_hz: expected 0..20000 samples/s, got {self.profiles_hz}")
        if self.max_stack_depth < 1:
            raise ValueError(f"max_stack_depth: expected >= 1, got {self.max_stack_depth}")
        if self.device_steps is not None and self.device_steps < 1:
            raise ValueError(f"device_steps: expected >= 1 steps, got {self.device_steps}")
        if self.flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s: expected > 0 s, got {self.flush_interval_s}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["functions_to_trace"] = list(self.functions_to_trace)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Settings":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        if "functions_to_trace" in known:
            known["functions_to_trace"] = tuple(known["functions_to_trace"])
        return cls(**known)
