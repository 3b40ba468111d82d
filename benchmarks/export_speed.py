"""Speed of the exports of one run, against the Chrome export: a run of N traced calls (``def f(): pass`` called N
times under ``stepscope run -t __main__.f``: N + 1 spans) recorded into a temporary store, then, in this process,
each export from the store to its bytes (the file written to the temporary folder, nothing sent):

- ``chrome``: ``store.reader.load_run`` + ``export.write_chrome_trace`` (what ``export --format chrome`` does);
- ``otlp file``: ``store.reader.load_parts`` + ``export.otlp_json.write_otlp_json`` (``export --format otlp -o``);
- ``otlp protobuf``: ``load_parts`` + ``export.otlp_encode.requests``, each ``ExportTraceServiceRequest`` serialized
  (``--endpoint`` and ``run --export otlp`` without the network);
- ``sentry envelopes``: ``load_parts`` + ``export.sentry_out.envelopes`` (``--format sentry`` without the network).

Each is timed ``--repeat`` times (the best wall and CPU seconds kept) and printed with its ratio to Chrome's, all in
the same process. Target (issue 30's follow-up): the OTLP file and protobuf within ~3x of Chrome's time.

    python benchmarks/export_speed.py                 # 200,000 calls
    python benchmarks/export_speed.py -n 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROGRAM = r'''
import sys

def f():
    pass

for _ in range(int(sys.argv[1])):
    f()
'''


def record(n: int, work: Path) -> tuple[Path, str]:
    """Record the run of ``n`` calls into ``work/store``: (store folder, run id)."""
    prog = work / "calls.py"
    prog.write_text(PROGRAM)
    store = work / "store"
    env = {**os.environ, "STEPSCOPE_STORE": str(store)}
    subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "-t", "__main__.f", "--", sys.executable,
                    str(prog), str(n)], env=env, check=True)
    from stepscope.store.db import Store

    st = Store(store)
    rid = st.resolve_id(None)
    st.close()
    return store, rid


def timed(fn, repeat: int) -> tuple[float, float, int]:
    """``(best wall s, best CPU s, what fn returned)`` over ``repeat`` calls."""
    wall = cpu = float("inf")
    out = 0
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200_000, help="traced calls (the run has n + 1 spans)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from stepscope.output.export import write_chrome_trace
    from stepscope.output.export.otlp_encode import requests
    from stepscope.output.export.otlp_json import write_otlp_json
    from stepscope.output.export.sentry_out import envelopes, parse_dsn
    from stepscope.store.db import Store
    from stepscope.store.reader import load_parts, load_run

    with tempfile.TemporaryDirectory(prefix="stepscope-export-speed-") as tmp:
        work = Path(tmp)
        store, rid = record(args.n, work)
        st = Store(store)
        dsn = parse_dsn("http://key@localhost:9/1")

        def chrome() -> int:
            with open(work / "run.trace.json", "wb") as fh:
                return write_chrome_trace(load_run(st, rid), fh)

        def otlp_file() -> int:
            with open(work / "run.otlp.json", "wb") as fh:
                return write_otlp_json(load_parts(st, rid), fh, rid)[1]

        def otlp_protobuf() -> int:
            return sum(len(m.SerializeToString()) for m in requests(load_parts(st, rid), rid))

        def sentry() -> int:
            return sum(len(e) for e in envelopes(load_parts(st, rid), rid, dsn))

        rows = [(name, *timed(fn, args.repeat)) for name, fn in
                (("chrome", chrome), ("otlp file", otlp_file), ("otlp protobuf", otlp_protobuf),
                 ("sentry envelopes", sentry))]
        st.close()
    base_w, base_c = rows[0][1], rows[0][2]
    print(f"{args.n + 1:,} spans, best of {args.repeat} (wall and CPU seconds; ratio to chrome)")
    print(f"{'export':<18}{'wall s':>9}{'cpu s':>9}{'x chrome':>10}{'x (cpu)':>9}{'MiB':>9}")
    for name, w, c, size in rows:
        print(f"{name:<18}{w:9.2f}{c:9.2f}{w / base_w:10.1f}{c / base_c:9.1f}{size / 2**20:9.1f}")
    print("target: otlp file and otlp protobuf within ~3x of chrome")


if __name__ == "__main__":
    main()
