"""The benchmark matrix: which configurations to run and how.

A *configuration* is a dict of parameters (``attention``, ``compile``, ``dtype``, ``batch``, ``size``,
``steps``... for ``bench sd``; ``args`` for a command). The matrix is the cartesian product of every
parameter's values. TOML form (``stepscope bench --config bench.toml``)::

    [bench]
    kind = "sd"                 # or "command"
    warmup = 1
    repeats = 5
    baseline = "attention=classic"

    [matrix]                    # for kind = "sd"
    model = ["tiny"]
    attention = ["classic", "sdpa"]
    compile = ["off"]

    # or, instead of a full product, the configurations one by one:
    [[config]]
    attention = "classic"
    [[config]]
    attention = "sdpa"
    compile = "default"

    # kind = "command": command = ["python", "script.py", "{args}"] and args = ["--x 1", "--x 2"] in [matrix];
    # record = ["--app", "comfyui"] (or "--trace"/"--step" options): each run recorded by `stepscope run` (sampling
    # and the memory lane off), its denoising steps' times kept per run
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import limits
from ..core.jsondepth import TOO_DEEP

ATTENTION = ("classic", "sdpa", "sdpa-math", "sdpa-efficient", "sdpa-flash", "sdpa-cudnn")
SD_DEFAULTS: dict[str, Any] = {"model": "tiny", "target": "pipeline", "attention": "sdpa", "compile": "off",
                               "dtype": "float32", "batch": 1, "size": None, "steps": 10, "channels_last": False}
SD_TYPES = {"batch": int, "size": int, "steps": int, "channels_last": lambda v: str(v).lower() in ("1", "true", "yes", "on")}


class SpecError(ValueError):
    """A malformed matrix or config file (the message names the field)."""


@dataclass(frozen=True)
class Spec:
    """What to run: ``kind`` ("sd" or "command"), the configurations, ``warmup`` untimed and ``repeats``
    timed runs per configuration, the ``baseline`` configuration's index, and for commands the template."""

    kind: str
    configs: list[dict[str, Any]]
    warmup: int = 1
    repeats: int = 5
    baseline: int = 0
    command: list[str] = field(default_factory=list)
    #: ``stepscope run`` options (``--trace``, ``--step``, ``--app``, ``--label``) to record each run of a command with:
    #: its steps (``core.steprules``) are timed per run; empty: the command's wall time only
    record: list[str] = field(default_factory=list)

    def label(self, i: int) -> str:
        """A short label: the parameters that vary across the matrix, ``attention=sdpa compile=off``."""
        varying = [k for k in self.configs[0] if len({str(c.get(k)) for c in self.configs}) > 1]
        c = self.configs[i]
        label = " ".join(f"{k}={c[k]}" for k in varying) or "default"
        same = [j for j in range(len(self.configs)) if self.configs[j] == c]
        return label if len(same) == 1 else f"{label} #{same.index(i) + 1}"  # an A/A test: tell them apart

    def to_dict(self) -> dict:
        return {"kind": self.kind, "configs": self.configs, "warmup": self.warmup, "repeats": self.repeats,
                "baseline": self.baseline, "command": self.command, "record": self.record}


def expand(matrix: dict[str, list]) -> list[dict[str, Any]]:
    """Cartesian product of parameter lists, in the order given."""
    keys = list(matrix)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(matrix[k] for k in keys))]


def _coerce(key: str, value: Any) -> Any:
    if value in ("", None, "none", "None"):
        return None
    conv = SD_TYPES.get(key)
    if conv is None:
        return value
    try:
        return conv(value)
    except (TypeError, ValueError):
        raise SpecError(f"{key}: expected {getattr(conv, '__name__', 'a value')}, got {value!r}") from None


def sd_spec(matrix: dict[str, list], warmup: int, repeats: int, baseline: str | None) -> Spec:
    """A Stable Diffusion matrix; unknown parameters and attention names, and batch (1-1024), steps
    (1-10000) or size (a multiple of 8, 8-8192) out of range are SpecErrors."""
    for k, vals in matrix.items():
        if k not in SD_DEFAULTS:
            raise SpecError(f"unknown parameter {k!r} (known: {', '.join(SD_DEFAULTS)})")
        if k == "attention":
            bad = [v for v in vals if v not in ATTENTION]
            if bad:
                raise SpecError(f"attention: unknown {bad[0]!r} (known: {', '.join(ATTENTION)})")
        if k == "target" and any(v not in ("pipeline", "unet") for v in vals):
            raise SpecError("target: expected pipeline or unet")
    full = {k: [_coerce(k, v) for v in matrix.get(k, [d])] for k, d in SD_DEFAULTS.items()}
    try:
        for v in full["batch"]:
            limits.in_range("batch", v, 1, 1024, integer=True)
        for v in full["steps"]:
            limits.in_range("steps", v, 1, 10_000, integer=True)
        for v in full["size"]:
            if v is not None:
                limits.image_size("size", v)
    except ValueError as e:
        raise SpecError(str(e)) from None
    configs = expand(full)
    return Spec("sd", configs, _count("warmup", warmup, 0), _count("repeats", repeats, 1), _baseline(configs, baseline))


RECORD_OPTIONS = ("--trace", "--step", "--app", "--label", "--trace-file")


def command_spec(command: list[str], arg_sets: list[str], warmup: int, repeats: int, baseline: str | None,
                 record: list[str] | None = None) -> Spec:
    """Any command; ``{args}`` in it is replaced by each argument set (split like a shell would). ``record``:
    ``stepscope run`` options (pairs of one of ``RECORD_OPTIONS`` and its value) to record each run with, for its
    steps' times."""
    if not command:
        raise SpecError("no command: stepscope bench [--args SET]... -- python script.py {args}")
    if arg_sets and not any("{args}" in a for a in command):
        raise SpecError("--args given but the command has no {args} placeholder")
    record = [str(x) for x in (record or [])]
    if len(record) % 2 or any(o not in RECORD_OPTIONS for o in record[::2]):
        raise SpecError(f"record: expected pairs of an option ({', '.join(RECORD_OPTIONS)}) and its value")
    configs = [{"args": a} for a in (arg_sets or [""])]
    return Spec("command", configs, _count("warmup", warmup, 0), _count("repeats", repeats, 1),
                _baseline(configs, baseline), list(command), record)


def _count(name: str, v: int, least: int) -> int:
    try:
        return limits.in_range(name, v, least, 100_000, integer=True)
    except ValueError as e:
        raise SpecError(str(e)) from None


def _baseline(configs: list[dict], spec: str | None) -> int:
    if not spec:
        return 0
    want = dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv)
    if not want:
        raise SpecError(f"--baseline {spec}: expected key=value[,key=value]")
    for i, c in enumerate(configs):
        if all(str(c.get(k)) == v for k, v in want.items()):
            return i
    raise SpecError(f"--baseline {spec}: no configuration matches")


def from_toml(path: str | Path) -> Spec:
    """A Spec from a TOML file (see the module doc). Raises SpecError naming the file and field."""
    import tomllib

    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except OSError as e:
        raise SpecError(f"{p}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not valid TOML ({e})") from None
    except RecursionError:  # (tomllib recurses a few frames per level of arrays or inline tables)
        raise SpecError(f"{p}: {TOO_DEEP}") from None
    b = doc.get("bench", {})
    m = doc.get("matrix", {})
    if not isinstance(m, dict) or any(not isinstance(v, list) for v in m.values()):
        raise SpecError(f"{p}: [matrix]: every parameter needs a list of values")
    try:
        if b.get("kind", "sd") == "command":
            rec = b.get("record", [])
            if not isinstance(rec, list):
                raise SpecError("record: expected a list of stepscope run options")
            return command_spec(list(b.get("command", [])), [str(a) for a in m.get("args", [])], b.get("warmup", 1),
                                b.get("repeats", 5), b.get("baseline"), rec)
        listed = doc.get("config")
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(c, dict) for c in listed) or not listed:
                raise SpecError("[[config]]: expected tables of parameters")
            specs = [sd_spec({k: [v] for k, v in c.items()}, b.get("warmup", 1), b.get("repeats", 5), None) for c in listed]
            configs = [s.configs[0] for s in specs]
            return Spec("sd", configs, specs[0].warmup, specs[0].repeats, _baseline(configs, b.get("baseline")))
        return sd_spec(m, b.get("warmup", 1), b.get("repeats", 5), b.get("baseline"))
    except SpecError as e:
        raise SpecError(f"{p}: {e}") from None
