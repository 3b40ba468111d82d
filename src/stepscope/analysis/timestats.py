"""Time changes between two runs: per span name, per denoising step and for the compared unit, and the phases.

The relative change of the median with a 95% bootstrap CI over the repeats (``bench.stats.compare``: percentile
bootstrap of the ratio of medians, B = 10,000 resamples). A change is *significant* when its CI excludes 0 and it
is at least ``NEGLIGIBLE`` (5%) and at least ``NOISE_K`` (1.5) times the runs' noise, the larger robust
coefficient of variation (1.4826 x MAD / median) of the repeats in A and in B: the repeats of one run share its
machine's load, so a CI over them cannot see that two runs ran under different loads; a run whose repeats vary by
25% cannot show a 25% change between runs. Otherwise "no significant difference". When the runs' main threads
waited for a CPU for different shares of the work (``analysis.envfacts.cpu_wait_share``: another program busy on
the machine), the ratio that waiting alone explains (``contention``) is divided out before deciding (``adjust``).
Start-up (run start to the first pipeline call or traced span: imports, model loading) is reported apart from the
work (first to last traced span) (``phases``).

Part 2 of ``analysis.diff.diff_runs``. Pure; times in ns.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..bench.stats import DIRECT_MAX, SELECT_MIN, ascending, compare, median
from ..core.model import RunData
from .calltree import ProfileIndex
from ..core.spantable import as_table, group_rows
from ..core.steprules import kind_of_name
from .envfacts import cpu_wait_share
from .spans import span_groups
from .steptable import step_table

NEGLIGIBLE = 0.05
NOISE_K = 1.5
MIN_CI_REPEATS = 3  # fewer repeats on either side: a ratio, no CI, no verdict of significance


@dataclass(slots=True)
class TimeChange:
    """A name's repeats in A and B: counts, medians (ns), change of the median (fraction: +0.8 = 1.8x
    slower), its 95% CI (None with fewer than ``MIN_CI_REPEATS`` repeats on a side), ``significant``
    (CI excludes 0 and |change| >= ``NEGLIGIBLE``), ``only_in`` ("a"/"b" when the name ran in one run only),
    totals (ns), ``noise``: the larger robust CV of the repeats in A and B (fraction)."""

    name: str
    n_a: int
    n_b: int
    median_a_ns: float
    median_b_ns: float
    total_a_ns: float
    total_b_ns: float
    change: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    significant: bool = False
    only_in: str | None = None
    noise: float = 0.0
    adjusted: float | None = None  # the change once the runs' CPU contention is taken out (see ``contention``)

    @property
    def ratio(self) -> float | None:
        return None if self.change is None else 1.0 + self.change

    @property
    def verdict(self) -> str:
        """"slower", "faster", "no significant difference", "only in A/B" or "single repeats"."""
        if self.only_in:
            return f"only in {self.only_in.upper()}"
        if self.change is None:
            return "-"
        if self.ci_low is None:
            return "too few repeats for a CI"
        if not self.significant:
            return "no significant difference"
        return "slower" if (self.adjusted if self.adjusted is not None else self.change) > 0 else "faster"


@dataclass(slots=True)
class Phase:
    """Start-up (run start to the first pipeline call or span), work (first to last span), whole run (ns)."""

    name: str
    a_ns: float | None
    b_ns: float | None


def time_change(name: str, a, b) -> TimeChange:
    """The change of ``b``'s median over ``a``'s (durations in ns: lists or float arrays, any length)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ma = median(a) if len(a) else 0.0
    mb = median(b) if len(b) else 0.0
    tc = TimeChange(name, len(a), len(b), ma, mb, float(a.sum()), float(b.sum()))
    if not len(a) or not len(b):
        tc.only_in = "a" if len(a) else "b"
        return tc
    if ma <= 0:
        return tc
    tc.change = mb / ma - 1.0
    if len(a) >= MIN_CI_REPEATS and len(b) >= MIN_CI_REPEATS:
        c = compare(b, a)
        tc.ci_low, tc.ci_high = c.ci_low, c.ci_high
        tc.noise = max(robust_cv(a), robust_cv(b))
        tc.significant = bool(c.significant and abs(tc.change) >= max(NEGLIGIBLE, NOISE_K * tc.noise))
    return tc


def robust_cv(x: list[float]) -> float:
    """1.4826 x MAD / median of ``x`` (0 for an empty or zero-median list): the spread of normal data as
    a fraction of the median, unmoved by a few outliers (a warm-up repeat)."""
    a = np.asarray(x, dtype=np.float64)
    if not len(a):
        return 0.0
    med = median(a)
    if med <= 0:
        return 0.0
    if len(a) > SELECT_MIN and ascending(a):  # |a - med| of an ascending array: two ascending runs, no select
        m = int(np.searchsorted(a, med))
        mad = _median_of_two((med - a[:m])[::-1], a[m:] - med)
    else:
        mad = float(np.median(np.abs(a - med)))
    return 1.4826 * mad / med


def _median_of_two(x: np.ndarray, y: np.ndarray) -> float:
    """The median of the union of two ascending float arrays (as ``np.median`` of their concatenation), by a
    binary search for the k-th smallest (O(log n))."""
    n = len(x) + len(y)

    def kth(k: int) -> float:  # the k-th smallest (0-based) of the union
        lo, hi = max(0, k + 1 - len(y)), min(k + 1, len(x))
        while lo < hi:  # i: how many of the k+1 smallest come from x
            i = (lo + hi) // 2
            if x[i] < y[k - i]:  # (k - i >= 0 and < len(y) here) x[i] is among them: more from x
                lo = i + 1
            else:
                hi = i
        i = lo
        cands = ([float(x[i - 1])] if i > 0 else []) + ([float(y[k - i])] if k - i >= 0 else [])
        return max(cands)

    if n % 2:
        return kth(n // 2)
    return float((np.float64(kth(n // 2 - 1)) + np.float64(kth(n // 2))) / 2)


def contention(a: RunData, b: RunData) -> float | None:
    """The ratio of times B/A that waiting for a CPU alone explains: ``(1 - wait share A) / (1 - wait share
    B)`` (a main thread that waited 50% of its runnable time took 2x its time on a CPU); None unless both
    runs recorded it. A program busy on another core (the machine's load) shows here, not in the env."""
    wa, wb = cpu_wait_share(a), cpu_wait_share(b)
    if wa is None or wb is None or wa >= 0.99 or wb >= 0.99:
        return None
    return (1 - wa) / (1 - wb)


def adjust(tc: TimeChange, k: float | None) -> None:
    """Take the runs' contention ratio ``k`` out of a change: the ratio and its CI are divided by ``k`` and
    significance is decided on them (same rule). Nothing when ``k`` is None or within 5% of 1."""
    if k is None or abs(k - 1) < NEGLIGIBLE or tc.change is None:
        return
    tc.adjusted = (1 + tc.change) / k - 1
    if tc.ci_low is not None:
        lo, hi = (1 + tc.ci_low) / k - 1, (1 + tc.ci_high) / k - 1
        tc.significant = bool((lo > 0 or hi < 0) and abs(tc.adjusted) >= max(NEGLIGIBLE, NOISE_K * tc.noise))


def span_changes(a: RunData, b: RunData) -> list[TimeChange]:
    """Per span name (transactions and sync sites apart), by the larger total time first."""
    def durations(d: RunData) -> dict[str, np.ndarray]:
        t = as_table(d.spans)
        rows = np.flatnonzero(~(t.op_mask("transaction") | t.op_mask("sync")))
        codes = t.name[rows]
        order, los, his = group_rows(codes)  # grouped by name on the columns: no object per span
        dur = t.dur
        # a name of many spans: its durations in ascending order, as ``span_stats`` sorted them (the statistics
        # are the same in any order past ``DIRECT_MAX``, and a sorted array's medians take one pass)
        groups = span_groups(t)
        big = {}
        if groups is not None:
            sc, sd, glo, ghi = groups[:4]
            big = {int(sc[a]): (a, b) for a, b in zip(glo.tolist(), ghi.tolist()) if b - a > DIRECT_MAX}
        out = {}
        for lo, hi in zip(los.tolist(), his.tolist()):
            code = int(codes[order[lo]])
            ab = big.get(code)
            if ab is not None and ab[1] - ab[0] == hi - lo:  # (no sync span of this name left out)
                out[t.names[code]] = sd[ab[0]:ab[1]].astype(np.float64)
            else:
                out[t.names[code]] = dur[rows[order[lo:hi]]].astype(np.float64)
        return out

    da, db = durations(a), durations(b)
    none = np.zeros(0)
    rows = [time_change(n, da.get(n, none), db.get(n, none)) for n in da.keys() | db.keys()]
    rows.sort(key=lambda r: -max(r.total_a_ns, r.total_b_ns))
    return rows


def _steps(d: RunData) -> dict[int, list[float]]:
    t = step_table(d.spans, max_rows=None)  # every step, however many
    out: dict[int, list[float]] = defaultdict(list)
    for r in (t.rows if t is not None else []):
        out[r.step].append(float(r.wall_ns))
    return out


def step_changes(a: RunData, b: RunData) -> list[TimeChange]:
    """Per denoising step index (over pipeline calls): its wall time in A and B."""
    sa, sb = _steps(a), _steps(b)
    return [time_change(f"step {i}", sa.get(i, []), sb.get(i, [])) for i in sorted(sa.keys() | sb.keys())]


def _import_ns(d: RunData, index: ProfileIndex | None, start: int, end: int) -> float | None:
    """Sampled time (ns) of the main thread (all threads when unnamed) in ``[start, end)`` with an import on
    the stack (``importlib._bootstrap``)."""
    if index is None or not len(index):
        return None
    main = next((tid for tid, name in d.profile.thread_names.items() if name == "MainThread"), None)
    idx = index.select(start, end, main)
    if not len(idx):
        return None
    fn_import = np.array([f.name.startswith("importlib._bootstrap") for f in index.functions] or [False])
    uniq, w, _ = index.stack_weights(idx)
    return float(sum(wt for sid, wt in zip(uniq.tolist(), w.tolist())
                     if any(fn_import[f] for f in index.stack_funcs[sid])))


def phases(a: RunData, b: RunData, index_a: ProfileIndex | None = None, index_b: ProfileIndex | None = None) -> list[Phase]:
    """Start-up (and the sampled time in imports within it), work and whole run of each (see ``Phase``)."""
    def of(d: RunData, index) -> tuple:
        t = as_table(d.spans)
        work = ~t.op_mask("transaction")
        if not work.any():
            return None, None, None, d.run.wall_time_ns
        scope_codes = [k for k, nm in enumerate(t.names) if kind_of_name(nm) == "scope"]
        scopes = work & np.isin(t.name, scope_codes) if scope_codes else work & False
        first = int(t.start[scopes if scopes.any() else work].min())
        last = int(t.end[work].max())
        return (float(first - d.run.start_ns), _import_ns(d, index, d.run.start_ns, first), float(last - first),
                d.run.wall_time_ns)

    pa, pb = of(a, index_a), of(b, index_b)
    out = [Phase("start-up (imports, model loading)", pa[0], pb[0])]
    if pa[1] is not None or pb[1] is not None:
        out.append(Phase("  of which imports (sampled)", pa[1], pb[1]))
    return out + [Phase("work (first to last traced call)", pa[2], pb[2]), Phase("whole run", pa[3], pb[3])]
