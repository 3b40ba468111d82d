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
#: Coefficient of variation of one configuration's timed runs above which the benchmark warns they are noisy
#: (``bench.results``): a change smaller than the noise cannot be told.
NOISY_RUNS_CV = 0.05


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


#: above this many values, bootstrap medians are drawn from the order statistics (``_boot_medians``)
DIRECT_MAX = 256


def _cluster_medians(x: np.ndarray, groups: np.ndarray, rng: np.random.Generator, b: int = 2000) -> np.ndarray:
    """``b`` cluster-bootstrap medians of ``x`` (shape ``(b,)``): each the median of the values of as many groups as
    there are, drawn with replacement (``groups``: a label per value)."""
    _, inv = np.unique(groups, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    parts = np.split(x[order], np.cumsum(np.bincount(inv))[:-1])
    g = len(parts)
    return np.array([np.median(np.concatenate([parts[i] for i in rng.integers(0, g, size=g)])) for _ in range(b)])


def _boot_medians(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``B`` bootstrap medians of ``x`` (shape ``(B,)``): the median of each of B resamples of ``len(x)`` values
    drawn with replacement.

    Up to ``DIRECT_MAX`` values the resamples are drawn (``B x n`` indices). Beyond, the same distribution is drawn
    in O(B) memory and time after a sort: a resample is ``sorted(x)[floor(n U_i)]`` for n uniforms U_i, a monotone
    map, so its k-th smallest value is ``sorted(x)[floor(n U_(k))]``, where the k-th order statistic of n uniforms
    ``U_(k)`` is Beta(k, n - k + 1) and, given ``U_(k) = u``, ``U_(k+1) = u + (1 - u) Beta(1, n - k)`` (the
    smallest of the n - k uniforms above u). For odd n the median is ``U_(k)``'s value with k = (n + 1) / 2; for
    even n the mean of the k-th and (k+1)-th with k = n / 2. (A million spans of one name resampled directly
    took 10,000 x 1M indices: 80 GB.)"""
    n = len(x)
    if n <= DIRECT_MAX:
        idx = rng.integers(0, n, size=(B, n))
        return np.median(x[idx], axis=1)
    xs = np.sort(x)
    k = (n + 1) // 2
    u = rng.beta(k, n - k + 1, size=B)
    lo = xs[np.minimum((u * n).astype(np.int64), n - 1)]
    if n % 2:
        return lo
    u2 = u + (1.0 - u) * rng.beta(1, n - k, size=B)
    return (lo + xs[np.minimum((u2 * n).astype(np.int64), n - 1)]) / 2.0


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


#: arrays longer than this are checked for order: an ascending one gives its median by index (no partition)
SELECT_MIN = 4096


def ascending(a: np.ndarray) -> bool:
    """Whether ``a`` (1-D) never decreases."""
    return bool((a[1:] >= a[:-1]).all())


def median(a: np.ndarray) -> float:
    """``np.median`` of a float64 array (not empty); read off by index when the array is ascending (the sorted
    groups of ``analysis.spans.span_groups``: a 9M-span name's median without a partition), the same value."""
    n = len(a)
    if n > SELECT_MIN and ascending(a):
        return float(a[n // 2]) if n % 2 else float((a[n // 2 - 1] + a[n // 2]) / 2)
    return float(np.median(a))


def compare(times, baseline, seed: int = 0) -> Change | None:
    """The change of ``times`` against ``baseline`` (lists or arrays of s, or any one unit; None if either is
    empty)."""
    x, b = np.asarray(times, float), np.asarray(baseline, float)
    if not len(x) or not len(b):
        return None
    rng = np.random.default_rng(seed)
    ratios = _boot_medians(x, rng) / _boot_medians(b, rng) - 1.0
    lo, hi = float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))
    return Change(float(median(x) / median(b) - 1.0), lo, hi, not (lo <= 0.0 <= hi))


def paired_change(times, baseline, seed: int = 0, groups=None) -> Change | None:
    """The change of paired measurements: ``times[i]`` against ``baseline[i]`` (lists or arrays of the same length,
    any one unit), each pair taken side by side, so that what drifts between pairs (a machine whose speed moves by
    20% for seconds or minutes) is in both sides of each. The change is the median of the pairs' ratios less 1 (a
    pair that one side's slow spell hit is an outlier the median resists), its 95% CI the 2.5th and 97.5th
    percentiles of the medians of ``B`` bootstrap resamples of the pairs (Efron's percentile method). ``groups``
    (one label per pair: the process, the phase it ran in): the resamples draw whole groups with replacement, the
    pairs of the drawn ones pooled (the cluster bootstrap, Davison & Hinkley 1997, section 3.8), for pairs that are
    not independent: a slow spell minutes long moves every pair of one process alike, and resampling those pairs one
    by one gave A/A runs of identical sides CIs that excluded 0 (-1.26..-0.27%). None when there is no pair;
    ValueError when the lengths differ."""
    x, b = np.asarray(times, float), np.asarray(baseline, float)
    if len(x) != len(b) or (groups is not None and len(groups) != len(x)):
        raise ValueError(f"paired_change: {len(x)} times against {len(b)} baseline values"
                         + (f" and {len(groups)} groups" if groups is not None else ""))
    if not len(x):
        return None
    r = x / b
    if groups is not None:
        meds = _cluster_medians(r, np.asarray(groups), np.random.default_rng(seed)) - 1.0
    else:
        meds = _boot_medians(r, np.random.default_rng(seed)) - 1.0
    lo, hi = float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))
    return Change(float(np.median(r) - 1.0), lo, hi, not (lo <= 0.0 <= hi))
