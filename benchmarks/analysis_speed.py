"""Analysis speed on a synthetic run of 100k samples and 10k spans (a long SD run's size).

Times, for the same data in one process: loading from the store, indexing the profile, the summary,
the report's view model and HTML, the speedscope and Chrome exports, and one span's flame graph.

    python benchmarks/analysis_speed.py [--samples 100000] [--spans 10000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

from stepscope.analysis.explain import explain
from stepscope.analysis.suggest import suggest
from stepscope.analysis.summary import summarize
from stepscope.output.export import to_chrome_trace, to_speedscope
from stepscope.core.model import Run
from stepscope.analysis.calltree import ProfileIndex
from stepscope.output.html.html import render_report
from stepscope.store import Store
from stepscope.store.reader import load_run


def synthesize(store: Store, n_samples: int, n_spans: int) -> str:
    rng = random.Random(0)
    run = Run(id="bench-run", command=["python", "bench.py"], start_ns=0, anchor_mono_ns=0, anchor_wall_ns=1_700_000_000 * 10**9,
              settings={"profiles_hz": 101})
    store.create_run(run, 1)
    funcs = [(f"mod{i % 40}.func{i}", f"mod{i % 40}", f"/src/mod{i % 40}.py", 10 + i) for i in range(400)]
    # stacks as a program makes them: a deep common root, and each sample's stack a small change of the
    # previous one near the leaf (a random walk), 2000 distinct stacks of depth 20-80
    stacks = []
    cur = tuple(rng.randrange(len(funcs)) for _ in range(40))
    for _ in range(2000):
        keep = max(20, len(cur) - rng.randint(1, 8))
        cur = cur[:keep] + tuple(rng.randrange(len(funcs)) for _ in range(rng.randint(1, 8)))
        cur = cur[:80]
        stacks.append(cur)
    period = 9_900_990
    samples = [(i * period, 1, min(len(stacks) - 1, i * len(stacks) // n_samples + rng.randint(0, 2)))
               for i in range(n_samples)]
    step = n_samples * period // n_spans
    spans = []
    for i in range(n_spans):
        parent = None if i % 10 == 0 else (i // 10) * 10 + 1
        spans.append((i + 1, parent, f"pkg.Model{i % 7}.forward", "function", i * step, i * step + step - 10, 1, None,
                      {"diffusion.step": i // 10} if i % 10 == 1 else None))
    store.append(run.id, spans=spans, frames=funcs, stacks=stacks, samples=samples, threads={1: ("MainThread", 1)})
    store.update_run(run.id, status="ok", end_ns=n_samples * period)
    return run.id


def timed(label: str, fn):
    t0 = time.perf_counter()
    out = fn()
    print(f"{label:<32} {1e3 * (time.perf_counter() - t0):8.1f} ms")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--spans", type=int, default=10_000)
    args = ap.parse_args()
    store = Store(tempfile.mkdtemp(prefix="stepscope-speed-"))
    run_id = synthesize(store, args.samples, args.spans)
    print(f"{args.samples} samples, {args.spans} spans")
    data = timed("load from store", lambda: load_run(store, run_id))
    index = timed("index profile", lambda: ProfileIndex(data.profile))
    summary = timed("summary", lambda: summarize(data, index))
    s = data.spans[5]
    timed("one span's call tree", lambda: index.tree(index.select(s.start_ns, s.end_ns, s.thread_id)))
    timed("whole-run call tree", lambda: index.tree(index.busy()))
    timed("explain (slow steps, diff tree)", lambda: explain(data, index=index))
    timed("suggest", lambda: suggest(data, index))
    html = timed("HTML report (view + render)", lambda: render_report(data, index=index, summary=summary))
    print(f"{'':<32} {len(html) / 1e6:8.1f} MB of HTML")
    timed("speedscope export", lambda: to_speedscope(data, index))
    timed("chrome trace export", lambda: to_chrome_trace(data, index))


if __name__ == "__main__":
    main()
