"""The one rule that fails a build on a slow-down: ``stepscope diff --fail-if slower[:PCT]`` and the pytest plugin's
``--stepscope-baseline`` both use it.

A comparison fails when its headline (``analysis.diff.Diff.headline``, the compared unit) is *significantly slower*
by diff's own rule (``analysis.timestats``: the CI of the change of the median excludes 0, the change is at least 5%
and at least 1.5 times the runs' noise; the runs' CPU contention taken out first when it differs) and, with a
threshold ``PCT``, when that change is also at least ``PCT`` percent. The change compared with ``PCT`` is the one
diff decides on: ``adjusted`` (without the CPU contention) when diff computed it, else the measured change of the
median. When diff took contention out, the measured change must be a significant slow-down by the same rule too:
another program busy on the machine can explain a slow-down away, never make one (the contention model takes the
main thread for one that needs a CPU all along; a thread that sleeps or waits on a device is woken by the sampler's
signals, and the waits after those wake-ups are counted without costing it any time).

Noise alone never fails: a change that is not significant passes, and is only called *too noisy* when the runs'
repeats vary by more than ``NOISY_CV`` (the comparison could not have seen a change of that size).

Pure; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..analysis.timestats import NEGLIGIBLE, NOISE_K, TimeChange

#: the robust CV of the repeats (fraction) above which a comparison without a significant change is "too noisy"
NOISY_CV = 0.10

_SPEC = re.compile(r"^\s*slower\s*(?::\s*([0-9]*\.?[0-9]+)\s*%?\s*)?$")


def parse_fail_if(text: str, option: str = "--fail-if") -> float | None:
    """``slower`` (None: any significant slow-down) or ``slower:PCT`` / ``slower:PCT%`` (the threshold in percent).
    Raises ValueError with one line naming ``option``, e.g. ``--fail-if: must be slower or slower:PCT (e.g.
    slower:5%), got 'faster'``."""
    m = _SPEC.match(text or "")
    if not m:
        raise ValueError(f"{option}: must be slower or slower:PCT (e.g. slower:5%), got {text!r}")
    return float(m.group(1)) if m.group(1) is not None else None


def decided_change(tc: TimeChange) -> float | None:
    """The change diff decides on (fraction): ``adjusted`` when present, else ``change``."""
    return tc.adjusted if tc.adjusted is not None else tc.change


def is_slower(tc: TimeChange, min_pct: float | None = None) -> bool:
    """Whether ``tc`` is significantly slower (see the module doc), and by at least ``min_pct`` percent when
    given."""
    c = decided_change(tc)
    if tc.only_in or c is None or tc.ci_low is None or not tc.significant or c <= 0:
        return False
    if tc.adjusted is not None and not (tc.ci_low > 0 and tc.change >= max(NEGLIGIBLE, NOISE_K * tc.noise)):
        return False  # measured: no significant slow-down (the contention taken out cannot make one)
    return min_pct is None or 100 * c >= min_pct


def is_noisy(tc: TimeChange) -> bool:
    """Not significant, with repeats that vary by more than ``NOISY_CV`` within a run: too noisy to decide."""
    return not tc.significant and tc.ci_low is not None and tc.noise > NOISY_CV


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the rule says of a comparison: ``outcome`` "slower" (fail), "noisy" (warn), "no CI" (too few repeats:
    a note) or "pass"; ``line``: one line to print (the verdict, with both run ids)."""

    outcome: str
    line: str


def judge(verdict: str, tc: TimeChange, run_a: str, run_b: str, min_pct: float | None = None) -> Judgement:
    """The ``Judgement`` of the comparison of run ``run_b`` against run ``run_a`` whose headline is ``tc`` and whose
    one-line verdict is ``verdict`` (``Diff.verdict``)."""
    runs = f"(baseline run {run_a}, this run {run_b})"
    if is_slower(tc, min_pct):
        limit = f" (threshold {min_pct:g}%)" if min_pct is not None else ""
        return Judgement("slower", f"stepscope: slower than the baseline{limit}: {verdict} {runs}")
    if tc.change is None or tc.ci_low is None:
        return Judgement("no CI", f"stepscope: not compared with the baseline: {verdict} {runs}")
    if is_noisy(tc):
        return Judgement("noisy", f"stepscope: too noisy to decide (repeats vary by {100 * tc.noise:.0f}% within a "
                                  f"run): {verdict} {runs}")
    return Judgement("pass", f"stepscope: {verdict} {runs}")
