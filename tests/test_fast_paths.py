"""The fast paths of the span analyses (issue 42: 10M spans) give exactly what the general code gives: each is
checked against the numpy call it replaces, on random inputs that take the fast path and inputs that must not
(sparse or repeated ids, spans of a thread starting at the same ns, unsorted durations)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stepscope.analysis.spans import sorted_percentile, span_stats
from stepscope.analysis.threadrows import thread_order as _thread_order
from stepscope.analysis.timestats import _median_of_two, robust_cv
from stepscope.bench.stats import SELECT_MIN, median
from stepscope.core.spantable import NO_PARENT, SpanTable, group_rows
from stepscope.store.reader import _start_order

ints = st.lists(st.integers(-5, 40), min_size=0, max_size=300)


def _table(ids, starts, ends, threads, parents=None, names=None) -> SpanTable:
    n = len(ids)
    order = np.lexsort((ids, starts))
    col = lambda x, dt=np.int64: np.asarray(x, dt)[order]  # noqa: E731
    return SpanTable(col(ids), col(parents if parents is not None else [NO_PARENT] * n),
                     col(names if names is not None else [0] * n, np.int32), ["a", "b", "c"],
                     np.zeros(n, np.int16), ["function"], col(starts), col(ends), col(threads),
                     np.full(n, -1, np.int32), [], {})


@given(ints)
def test_group_rows_is_a_stable_argsort(keys):
    k = np.array(keys, np.int64)
    order, lo, hi = group_rows(k)
    assert (order == np.argsort(k, kind="stable")).all()
    sk = k[order]
    assert all((sk[a:b] == sk[a]).all() for a, b in zip(lo, hi))
    assert len(set(sk[lo].tolist())) == len(lo) and (len(k) == 0 or hi[-1] == len(k))


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=200), st.data())
def test_start_order_dense_and_sparse_ids(starts, data):
    n = len(starts)
    dense = data.draw(st.booleans())
    ids = (np.random.default_rng(len(starts)).permutation(n) + 7 if dense else
           np.array(data.draw(st.lists(st.integers(0, 3 * n), min_size=n, max_size=n)), np.int64))
    s = np.array(starts, np.int64)
    assert (_start_order(np.asarray(ids, np.int64), s) == np.lexsort((ids, s))).all()
    # ids numbered in start order (as stepscope numbers them): the O(n) path's case
    ids2 = np.empty(n, np.int64)
    ids2[np.lexsort((np.arange(n), s))] = np.arange(n) + 100
    assert (_start_order(ids2, s) == np.lexsort((ids2, s))).all()


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20), st.integers(0, 2)), min_size=1, max_size=120),
       st.booleans())
def test_rows_of_dense_and_sparse(spans, dense):
    n = len(spans)
    ids = np.arange(n) + 5 if dense else np.arange(n) * 3 + 5
    t = _table(ids, [a for a, _, _ in spans], [a + d for a, d, _ in spans], [th for _, _, th in spans],
               parents=[int(ids[(i * 7) % n]) if i % 3 else 10**9 for i in range(n)])
    ask = np.array([*t.id.tolist(), -1, 4, 10**9, int(t.id.max()) + 1], np.int64)
    order = np.argsort(t.id, kind="stable")
    sid = t.id[order]
    pos = np.minimum(np.searchsorted(sid, ask), n - 1)
    assert (t.rows_of(ask) == np.where(sid[pos] == ask, order[pos], -1)).all()
    assert not t.parent_rows().flags.writeable  # computed once, shared: nobody may change it


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 9), st.integers(0, 3)), min_size=1, max_size=150))
def test_thread_order_with_and_without_ties(spans):
    n = len(spans)
    t = _table(np.arange(n), [a for a, _, _ in spans], [a + d for a, d, _ in spans], [th for _, _, th in spans])
    assert (_thread_order(t) == np.lexsort((np.arange(n), -t.end, t.start, t.thread))).all()


@settings(max_examples=60)
@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=60), st.floats(0, 100))
def test_sorted_percentile_is_numpys(values, q):
    a = np.sort(np.array(values, np.int64))
    assert sorted_percentile(a, q) == float(np.percentile(a, q))


def test_span_stats_percentiles_match_numpy():
    rng = np.random.default_rng(5)
    n = 5000
    start = np.sort(rng.integers(0, 10**9, n))
    t = _table(np.arange(n), start, start + rng.integers(0, 10**6, n), np.zeros(n), names=rng.integers(0, 3, n))
    for s in span_stats(t, None):
        d = t.dur[t.name == t.names.index(s.name)]
        assert (s.count, s.total_ns, s.max_ns) == (len(d), int(d.sum()), int(d.max()))
        assert s.p50_ns == float(np.percentile(d, 50)) and s.p95_ns == float(np.percentile(d, 95))


@given(st.integers(1, 3 * SELECT_MIN), st.sampled_from(["ints", "floats", "flat"]), st.booleans())
@settings(max_examples=40)
def test_median_and_robust_cv_sorted_or_not(n, kind, sort):
    rng = np.random.default_rng(n)
    a = {"ints": lambda: rng.integers(1, 30, n).astype(float), "floats": lambda: rng.exponential(50.0, n),
         "flat": lambda: np.full(n, 3.0)}[kind]()
    if sort:
        a = np.sort(a)
    med = float(np.median(a))
    assert median(a) == med
    assert robust_cv(a) == 1.4826 * float(np.median(np.abs(a - med))) / med


@given(st.lists(st.floats(0, 1e6), max_size=50), st.lists(st.floats(0, 1e6), max_size=50))
def test_median_of_two_sorted_runs(x, y):
    if not x and not y:
        return
    xs, ys = np.sort(np.array(x, float)), np.sort(np.array(y, float))
    assert _median_of_two(xs, ys) == float(np.median(np.concatenate([xs, ys])))


def test_load_both_raises_for_an_unknown_run_in_either_thread(tmp_path):
    import pytest

    from stepscope.analysis.runpick import load_both
    from stepscope.store.db import Store, StoreError

    store = Store(tmp_path / "store")
    with pytest.raises(StoreError):
        load_both(store, "nope-a", "nope-b")
    store.close()


def test_prefetch_reads_gunzips_and_hands_errors_to_the_caller(tmp_path):
    import gzip

    import pytest

    from stepscope.device.rawread import Prefetch, TraceError
    from stepscope.device.kineto import TraceError as KinetoTraceError

    assert TraceError is KinetoTraceError  # (one class, whichever module names it)
    doc = b'{"traceEvents": []}' * 1000
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(doc))
    assert Prefetch(tmp_path / "t.json.gz").result() == doc
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b" + b"not gzip")
    with pytest.raises(TraceError, match="bad.json.gz: cannot read"):
        Prefetch(tmp_path / "bad.json.gz").result()
    with pytest.raises(TraceError, match="no such file"):
        Prefetch(tmp_path / "missing.json").result()
