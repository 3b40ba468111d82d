"""The one rule for "slow", used by every table and by ``explain``.

A repeat (a denoising step, a call of a span) is slow when its duration exceeds both
``median + 3 * 1.4826 * MAD`` (3 robust standard deviations: 1.4826 x the median absolute deviation
estimates sigma for normal data, Rousseeuw & Croux 1993) **and** ``1.2 x median`` (so that tiny
deviations of a very regular loop are not flagged).

The first repeat, when it is slow *and* later repeats are slow too, is a *warm-up* (the first call of a
pipeline allocates, caches, compiles): it is set apart (``SlowCall.warmup``), neither slow nor fast, so
that the shape and the cause of the later slow repeats are not blurred by it. Alone it stays slow (the
shape "first").

When the repeats that are not slow vary too much among themselves (their coefficient of variation,
standard deviation / mean, above ``TOO_NOISY_TO_CALL_CV``), no repeat is marked: a difference could be
noise, and the rule says "too noisy to call" instead.

A busy machine: where each repeat's wait for a CPU is known (``waits``: the scheduler's run-queue delay of its
thread, ``analysis.cpuwait``), the rule runs on each repeat's time less that wait, the time the program itself took.
A repeat slow by its wall time alone, and no longer once its wait is taken out, *waited for a CPU* (another process,
or more threads than CPUs, held them): set apart (``SlowCall.waited``), not slow, and said in the rule's line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

def _dur(ns: float) -> str:
    """A duration in the unit that shows it (ms from 1 ms, us below: a 0.0 ms limit said nothing)."""
    return f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.1f} us"


MAD_K = 3.0
MAD_SIGMA = 1.4826
MIN_RATIO = 1.2
#: Coefficient of variation of the fast repeats above which no repeat is called slow.
TOO_NOISY_TO_CALL_CV = 0.4
#: The rule in words, stated once wherever slow repeats are marked.
RULE_TEXT = f"slow = longer than both median + {MAD_K:g} x 1.4826 x MAD and {MIN_RATIO:g} x median"


@dataclass(slots=True)
class SlowCall:
    """The rule applied to durations (ns). ``mask``: True for slow repeats (all False when ``noisy``;
    the first repeat False when ``warmup``: it is a warm-up, set apart);
    ``median``/``mad``/``limit`` in ns; ``cv``: coefficient of variation of the repeats under the limit;
    ``rule``: one line saying the rule with its numbers (or that it is too noisy to call)."""

    mask: np.ndarray
    median: float
    mad: float
    limit: float
    cv: float
    noisy: bool
    rule: str
    warmup: bool = False
    #: per repeat, whether it was slow only by its wait for a CPU (None: the waits were not known)
    waited: np.ndarray | None = None
    #: per repeat, its wait for a CPU (ns, NaN: unknown), as given
    wait_ns: np.ndarray | None = None


def limit_of(values: np.ndarray) -> tuple[float, float, float]:
    """``(median, MAD, limit)`` of ``values`` (any unit) by the rule."""
    med = float(np.median(values))
    mad = float(np.median(np.abs(values - med)))
    return med, mad, max(med + MAD_K * MAD_SIGMA * mad, MIN_RATIO * med)


def call_slow(durations, waits=None) -> SlowCall:
    """Apply the rule to repeat durations (ns, any array-like of >= 1 values). ``waits``: each repeat's wait for a
    CPU (ns, NaN where unknown; see the module doc), or None."""
    d = np.asarray(durations, dtype=np.float64)
    if waits is not None and len(d):
        w = np.asarray(waits, dtype=np.float64)
        if len(w) == len(d) and np.nansum(w) > 0:
            own = np.maximum(d - np.nan_to_num(w), 0.0)
            v = call_slow(own)
            waited = (d > limit_of(d)[2]) & ~v.mask & (np.nan_to_num(w) > 0)
            if v.warmup:
                waited[0] = False
            v.waited, v.wait_ns = waited, w
            v.rule += "; each repeat's time less its wait for a CPU"
            if waited.any():
                idx = np.flatnonzero(waited)
                v.rule += (f"; {_list(idx)} slow only by {'its' if len(idx) == 1 else 'their'} wait for a CPU "
                           f"({_dur(float(np.nanmedian(w[idx])))}"
                           f"{' median' if len(idx) > 1 else ''}: other processes or threads held the CPUs), set apart")
            return v
    if not len(d):
        return SlowCall(np.zeros(0, bool), 0.0, 0.0, 0.0, 0.0, False, RULE_TEXT)
    med, mad, limit = limit_of(d)
    mask = d > limit
    warmup = bool(len(d) > 2 and mask[0] and mask[1:].any())
    if warmup:
        mask[0] = False
    fast = d[~mask][1:] if warmup else d[~mask]
    cv = float(fast.std() / fast.mean()) if len(fast) >= 3 and fast.mean() > 0 else 0.0
    nums = f"limit {_dur(limit)} (median {_dur(med)}, MAD {_dur(mad)})"
    if warmup:
        nums += f"; the first repeat ({d[0] / med:.1f} x median) is a warm-up, set apart"
    if cv > TOO_NOISY_TO_CALL_CV:
        return SlowCall(np.zeros(len(d), bool), med, mad, limit, cv, True,
                        f"too noisy to call: the fast repeats vary by {100 * cv:.0f}% (coefficient of variation over "
                        f"{100 * TOO_NOISY_TO_CALL_CV:.0f}%), so no repeat is marked slow; {nums}", warmup)
    return SlowCall(mask, med, mad, limit, cv, False, f"{RULE_TEXT}: {nums}", warmup)


def _list(idx: np.ndarray) -> str:
    """"repeat 8" / "repeats 2, 8, 9" (at most 8 named)."""
    ks = idx.tolist()
    head = ", ".join(map(str, ks[:8])) + (f" and {len(ks) - 8} more" if len(ks) > 8 else "")
    return f"repeat{'s' if len(ks) > 1 else ''} {head}"


def slow_cells(values: np.ndarray) -> np.ndarray:
    """Per value, whether it is slow by the rule among its column (no noise check: cells are only
    highlighted in rows already called slow). ``values``: ns, NaN for a missing cell (never slow)."""
    v = np.asarray(values, dtype=np.float64)
    ok = ~np.isnan(v)
    out = np.zeros(len(v), bool)
    if ok.sum() < 3:
        return out
    med, mad, limit = limit_of(v[ok])
    out[ok] = (v[ok] > limit) & (v[ok] > 0)
    return out


def shape_of(slow_idx: list[int], n: int) -> str:
    """"first", "every k" (k >= 2), "irregular" or "none"."""
    if not slow_idx:
        return "none"
    if slow_idx == [0]:
        return "first"
    if len(slow_idx) >= 2:
        k = slow_idx[1] - slow_idx[0]
        if k >= 2 and all(b - a == k for a, b in zip(slow_idx, slow_idx[1:])):
            expected = list(range(slow_idx[0] % k, n, k))
            if slow_idx == expected or slow_idx == [i for i in expected if i >= slow_idx[0]]:
                return f"every {k}"
    return "irregular"
