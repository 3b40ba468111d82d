"""The verdict of a ``stepscope try`` benchmark (``store.bench.load``'s dict, kind "try"): per configuration
the whole call's and the denoising step's statistics and change against the baseline (``bench.stats``: median,
bootstrap 95% CI, CV warning), peak memory, warm-up (with torch.compile's compile time apart), how far the
output moved from the baseline's, whether the program printed the same; the recommendation.

A timed run's *denoising step* is the mean of its step intervals (``fixes.child``: scheduler step end to the
next one's end), so each repeat gives one value, as each gives one whole-call time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..bench.stats import NOISY_RUNS_CV, Change, ConfigStats, compare, describe
from . import EXCLUSIVE, FIXES

#: a configuration is "within the baseline's peak memory" up to this much above it (RSS moves by a few MiB
#: between identical processes)
MEMORY_TOLERANCE = 0.02


@dataclass(slots=True)
class Row:
    """One configuration. Times in s, memory in bytes, changes as fractions (-0.31: 31% less)."""

    index: int
    label: str
    fixes: list[str]
    call: ConfigStats | None
    call_change: Change | None
    step: ConfigStats | None
    step_change: Change | None
    peak_bytes: int | None
    peak_change: float | None
    warmup_s: float | None
    compile_s: float | None  # the warm-up's excess over a timed call, for a configuration with compile
    output: dict = field(default_factory=dict)  # max_abs_diff, psnr_db, kind, shape (vs the baseline)
    applied: dict = field(default_factory=dict)
    stdout_same: bool | None = None
    exit_code: int | None = None
    problem: str | None = None
    call_times: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)


@dataclass(slots=True)
class TryVerdict:
    """The table, the fixes that did not apply (fix -> why), warnings and the recommendation (a row's index and
    its line; None and a line when nothing qualifies)."""

    bench_id: str
    status: str
    command: list[str]
    rows: list[Row]
    not_applicable: dict[str, str]
    warnings: list[str]
    recommended: int | None
    recommendation: str
    measured: str = ""


def output_change(base: np.ndarray, other: np.ndarray, kind: str) -> dict:
    """Max absolute difference and PSNR (dB) of ``other`` against ``base`` (same shape). Peak for the PSNR:
    1.0 for images (0-1 floats), the baseline's range for tensors (latents). Identical: PSNR ``inf``."""
    if base.shape != other.shape:
        return {"kind": kind, "shape": list(other.shape), "error": f"shape {list(other.shape)} vs the baseline's "
                                                                   f"{list(base.shape)}"}
    d = other.astype(np.float64) - base.astype(np.float64)
    finite = bool(np.isfinite(d).all())
    mse = float(np.mean(d * d)) if d.size else 0.0
    peak = 1.0 if kind == "image" else float(np.ptp(base)) or 1.0
    psnr = math.inf if mse == 0 else 10 * math.log10(peak * peak / mse) if finite else None
    return {"kind": kind, "shape": list(other.shape), "max_abs_diff": float(np.abs(d).max()) if finite and d.size
            else None, "psnr_db": psnr, "finite": finite}


def compare_outputs(folder: str | Path, n: int) -> dict:
    """Each configuration's saved output (``<folder>/<i>.npy``) and program stdout (``<i>.stdout``) against the
    baseline's (0): ``{str(i): {max_abs_diff, psnr_db, kind, shape, stdout_same}}``."""
    folder = Path(folder)
    base_path = folder / "0.npy"
    base = np.load(base_path) if base_path.exists() else None
    outputs = {}
    base_stdout = (folder / "0.stdout").read_bytes() if (folder / "0.stdout").exists() else None
    for i in range(1, n):
        doc: dict = {}
        p = folder / f"{i}.npy"
        if base is not None and p.exists():
            arr = np.load(p)
            kind = "image" if base.min() >= 0 and base.max() <= 1 else "tensor"
            doc = output_change(base, arr, kind)
        so = folder / f"{i}.stdout"
        if base_stdout is not None and so.exists():
            doc["stdout_same"] = so.read_bytes() == base_stdout
        outputs[str(i)] = doc
    return outputs


def _step_means(b: dict) -> dict[int, list[float]]:
    """Per configuration, each timed run's mean step interval (s)."""
    out: dict[int, list[float]] = {}
    for r in b["runs"]:
        if not r["warmup"] and not r["error"] and r["steps_s"]:
            out.setdefault(r["config"], []).append(float(np.mean(r["steps_s"])))
    return out


def rows_of(b: dict) -> list[Row]:
    """Every configuration's row (see ``Row``); the whole call's figures are ``bench.results.verdict``'s."""
    from ..bench.results import verdict

    tn = (b.get("notes") or {}).get("try") or {}
    steps = _step_means(b)
    compared = tn.get("compared") or {}
    calls = verdict(b).rows
    base_peak = calls[0].peak_bytes if calls else None
    rows = []
    for c in calls:
        i, peak = c.index, c.peak_bytes
        fixes = list(c.config.get("fixes") or [])
        comp = dict(compared.get(str(i)) or {})
        stdout_same = comp.pop("stdout_same", None)
        s = steps.get(i, [])
        compile_s = (c.first_warmup_s - c.stats.median) if ("compile" in fixes and c.first_warmup_s is not None
                                                             and c.stats is not None) else None
        rows.append(Row(i, c.label, fixes, c.stats, c.change, describe(s), compare(s, steps.get(0, [])) if i else None,
                        peak, (peak / base_peak - 1.0) if i and peak and base_peak else None, c.first_warmup_s,
                        compile_s, comp, (tn.get("applied") or {}).get(str(i), {}), stdout_same,
                        (tn.get("exit") or {}).get(str(i)), c.problem, c.times_s, s))
    return rows


def _lead(r: Row) -> tuple[ConfigStats | None, Change | None, str]:
    """The figure a configuration is judged by: the denoising step when steps were seen, else the whole call."""
    if r.step is not None and (r.index == 0 or r.step_change is not None):
        return r.step, r.step_change, "a denoising step"
    return r.call, r.call_change, "the pipeline call"


def within_memory(r: Row) -> bool:
    """Peak memory at most ``MEMORY_TOLERANCE`` above the baseline's (or not measured)."""
    return r.peak_change is None or r.peak_change <= MEMORY_TOLERANCE


def helped(r: Row) -> bool:
    """Significantly faster than the baseline (its CI below 0) and within the baseline's peak memory."""
    _, ch, _ = _lead(r)
    return ch is not None and ch.significant and ch.change < 0 and within_memory(r)


def verdict_word(r: Row) -> str:
    """A configuration's verdict in words: ``baseline``, ``failed``, ``faster``, ``faster, more memory``, ``slower``,
    ``no significant change`` (on the denoising step when measured, else the call) or ``-`` (nothing to compare)."""
    if r.index == 0:
        return "baseline"
    if r.problem:
        return "failed"
    ch = r.step_change if r.step_change is not None else r.call_change
    if ch is None:
        return "-"
    if not ch.significant:
        return "no significant change"
    if ch.change < 0:
        return "faster" if helped(r) else "faster, more memory"
    return "slower"


def combination(b: dict) -> list[str]:
    """The fixes to combine: each single fix that helped; of ``EXCLUSIVE`` groups the fastest; in ``FIXES``
    order. Fewer than two: nothing to combine."""
    singles = [r for r in rows_of(b) if len(r.fixes) == 1 and helped(r)]
    chosen = {r.fixes[0]: _lead(r)[1].change for r in singles}
    for group in EXCLUSIVE:
        members = [f for f in group if f in chosen]
        for f in sorted(members, key=lambda f: chosen[f])[1:]:
            del chosen[f]
    return [f for f in FIXES if f in chosen]


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def recommendation_line(r: Row) -> str:
    """``sdpa + channels_last: a denoising step -31.4% (CI -33.0 .. -29.9), image max |diff| 0.004 (PSNR 51 dB),
    peak memory -18%``."""
    _, ch, what = _lead(r)
    parts = [f"{r.label}: {what} {_pct(ch.change)} (CI {100 * ch.ci_low:+.1f} .. {100 * ch.ci_high:+.1f})"]
    o = r.output
    if o.get("max_abs_diff") is not None:
        psnr = o.get("psnr_db")
        ptxt = "identical" if psnr == math.inf else f"PSNR {psnr:.0f} dB"
        parts.append(f"{o.get('kind', 'output')} max |diff| {o['max_abs_diff']:.3g} ({ptxt})")
    if r.peak_change is not None:
        parts.append(f"peak memory {100 * r.peak_change:+.0f}%")
    return ", ".join(parts)


def try_verdict(b: dict) -> TryVerdict:
    """From ``store.bench.load``'s dict of a benchmark of kind "try"."""
    from ..bench.results import measured

    rows = rows_of(b)
    tn = (b.get("notes") or {}).get("try") or {}
    warnings = []
    for r in rows:
        noisy = [f"{name} {100 * st.cv:.0f}%" for name, st in (("call", r.call), ("step", r.step))
                 if st is not None and st.cv > NOISY_RUNS_CV]
        if noisy:
            warnings.append(f"{r.label}: noisy (CV {', '.join(noisy)} > {100 * NOISY_RUNS_CV:.0f}%): more repeats or a "
                            "quieter machine give a narrower CI")
        if r.output.get("finite") is False:
            warnings.append(f"{r.label}: the output has NaN or infinite values")
        if r.stdout_same is False:
            warnings.append(f"{r.label}: the program printed something else than with the baseline")
        if r.exit_code not in (None, 0):
            warnings.append(f"{r.label}: the program exited with status {r.exit_code}")
    good = [r for r in rows if r.index and helped(r)]
    best = min(good, key=lambda r: _lead(r)[0].median) if good else None
    line = (recommendation_line(best) if best is not None else
            "no configuration measured significantly faster within the baseline's peak memory")
    return TryVerdict(b["id"], b["status"], list(b["spec"].get("command") or []), rows,
                      dict(tn.get("not_applicable") or {}), warnings, best.index if best else None, line, measured(b))

