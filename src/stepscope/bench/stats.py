"""Statistics for benchmark results: medians, IQR, bootstrap confidence intervals, verdicts.

Bootstrap (Efron's percentile method): resample the repeats of each configuration with replacement
(``B`` = 10,000 resamples, seeded), take the median of each resample; the 2.5th and 97.5th percentiles
of those medians are the 95% CI. For the change against the baseline, both groups are resampled
independently and the statistic is ``median(config) / median(baseline) - 1``. A change is significant
when its CI excludes 0. The coefficient of variation (std / mean) flags noisy configurations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

B = 10_000
NOISY_CV = 0.05


@dataclass(slots=True)
class ConfigStats:
    """One configuration's timed runs (s): count, median, IQR, mean, CV, 95% CI of the median."""

    n: int
    median: float
    q25: float
    q75: float
    mean: float
    cv: float
    ci_low: float
    ci_high: float


@dataclass(slots=True)
class Change:
    """Change of a configuration's median against the baseline's (fraction: -0.279 = 27.9% faster) with
    its 95% CI; ``significant`` when the CI excludes 0."""

    change: float
    ci_low: float
    ci_high: float
    significant: bool


def _boot_medians(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, len(x), size=(B, len(x)))
    return np.median(x[idx], axis=1)


def describe(times: list[float], seed: int = 0) -> ConfigStats | None:
    """Statistics of one configuration's times (None without any)."""
    x = np.asarray(times, dtype=np.float64)
    if not len(x):
        return None
    rng = np.random.default_rng(seed)
    meds = _boot_medians(x, rng)
    mean = float(x.mean())
    return ConfigStats(len(x), float(np.median(x)), float(np.percentile(x, 25)), float(np.percentile(x, 75)), mean,
                       float(x.std(ddof=1) / mean) if len(x) > 1 and mean else 0.0,
                       float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5)))


def compare(times: list[float], baseline: list[float], seed: int = 0) -> Change | None:
    """The change of ``times`` against ``baseline`` (None if either is empty)."""
    x, b = np.asarray(times, float), np.asarray(baseline, float)
    if not len(x) or not len(b):
        return None
    rng = np.random.default_rng(seed)
    ratios = _boot_medians(x, rng) / _boot_medians(b, rng) - 1.0
    lo, hi = float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))
    return Change(float(np.median(x) / np.median(b) - 1.0), lo, hi, not (lo <= 0.0 <= hi))
