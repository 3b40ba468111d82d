"""The verdict of a stored benchmark: per configuration its statistics and its change against the
baseline, in the seed's table shape (runtime, change in %, CI), plus warnings about noise."""

from __future__ import annotations

from dataclasses import dataclass, field

from .stats import NOISY_RUNS_CV, Change, ConfigStats, compare, describe


@dataclass(slots=True)
class Row:
    """One configuration: label, parameters, stats of timed runs (s), change vs baseline, peak memory
    (bytes), warm-up (first warm-up, s, includes compile), per-step median (s), why it did not run."""

    index: int
    label: str
    config: dict
    stats: ConfigStats | None
    change: Change | None
    is_baseline: bool
    peak_bytes: int | None
    first_warmup_s: float | None
    step_median_s: float | None
    times_s: list[float] = field(default_factory=list)
    problem: str | None = None


@dataclass(slots=True)
class Verdict:
    """The whole table plus warnings (noisy configurations, failed runs)."""

    bench_id: str
    status: str
    rows: list[Row]
    warnings: list[str]
    measured: str = ""


MiB = 2**20


def mem_text(n_bytes: int | None) -> str:
    """Memory in the one unit every benchmark view uses: MiB (2**20 bytes)."""
    return "-" if not n_bytes else f"{n_bytes / MiB:,.0f} MiB"


def measured(b: dict) -> str:
    """What was measured, in one line: the parameters shared by every configuration (model, size,
    steps, dtype, batch...; the varying ones are in the labels), the device and torch version, e.g.
    ``model tiny · 64 px · 10 steps · float32 · batch 1 · cpu · torch 2.13.0``."""
    spec = b.get("spec") or {}
    configs = spec.get("configs") or []
    env = b.get("env") or {}
    parts: list[str] = []
    if spec.get("kind") == "command" or spec.get("command"):
        cmd = spec.get("command")
        parts.append("command " + (" ".join(cmd) if isinstance(cmd, list) else str(cmd or "")))
    elif configs:
        first = configs[0]
        same = {k: v for k, v in first.items() if all(str(c.get(k)) == str(v) for c in configs)}
        if "model" in same:
            parts.append(f"model {same['model']}")
        if "size" in same:
            size = same["size"]
            if size is None and same.get("model") in ("tiny", "sd15"):
                from ..pipelines.sd import default_size

                size = default_size(same["model"])
            parts.append(f"{size} px" if size else "model's size")
        if "steps" in same:
            parts.append(f"{same['steps']} steps")
        for k in ("dtype", "attention", "compile", "target"):
            if k in same:
                parts.append(str(same[k]) if k == "dtype" else f"{k} {same[k]}")
        if "batch" in same:
            parts.append(f"batch {same['batch']}")
        varying = [k for k in first if k not in same]
        if varying:
            parts.append("varying: " + ", ".join(varying))
    dev = env.get("device_name") or env.get("device")
    if dev:
        parts.append(str(dev))
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    return " · ".join(parts)


def verdict(b: dict) -> Verdict:
    """From ``store.bench.load``'s dict."""
    spec = b["spec"]
    n = len(spec["configs"])
    timed: dict[int, list[float]] = {i: [] for i in range(n)}
    steps: dict[int, list[float]] = {i: [] for i in range(n)}
    peak: dict[int, int] = {}
    first_warm: dict[int, float] = {}
    errors: dict[int, str] = {}
    for r in b["runs"]:
        i = r["config"]
        if r["error"]:
            errors.setdefault(i, r["error"])
            continue
        if r["warmup"]:
            first_warm.setdefault(i, r["wall_s"])
            continue
        timed[i].append(r["wall_s"])
        steps[i].extend(r["steps_s"] or [])
        if r["peak_bytes"]:
            peak[i] = max(peak.get(i, 0), r["peak_bytes"])
    notes = b.get("notes") or {}
    base = spec["baseline"]
    rows, warnings = [], []
    for i in range(n):
        st = describe(timed[i])
        ch = compare(timed[i], timed[base]) if i != base else None
        problem = (notes.get("unavailable", {}).get(str(i)) or notes.get("errors", {}).get(str(i)) or errors.get(i))
        srt = sorted(steps[i])
        rows.append(Row(i, b["labels"][i], spec["configs"][i], st, ch, i == base, peak.get(i), first_warm.get(i),
                        srt[len(srt) // 2] if srt else None, timed[i], problem if not timed[i] else None))
        if st is not None and st.cv > NOISY_RUNS_CV:
            warnings.append(f"{b['labels'][i]}: noisy (CV {100 * st.cv:.1f}% > {100 * NOISY_RUNS_CV:.0f}%); "
                            f"more repeats or a quieter machine give a narrower CI")
        if errors.get(i) and timed[i]:
            warnings.append(f"{b['labels'][i]}: some runs failed: {errors[i]}")
    return Verdict(b["id"], b["status"], rows, warnings, measured(b))
