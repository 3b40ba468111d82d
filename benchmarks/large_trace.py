"""Large Kineto traces for the scale benchmarks, made from a real one: ``../shared/traces/v100_training_rank0.json.gz``
(68,692 events, 45,420 complete) replicated ``copies`` times, each copy shifted in time by the trace's span (plus
1 ms) and its ids (``correlation``, ``External id``, ``Ev Idx``, flow ``id``) by a stride, so the copies read as
consecutive iterations of one training run. Written gzipped to ``~/.cache/stepscope/bench/`` and reused.

    python benchmarks/large_trace.py --copies 38      # ~2.6M events (HTA's "quarter of real traces" size)
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import orjson

SOURCE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "v100_training_rank0.json.gz"
CACHE = Path.home() / ".cache" / "stepscope" / "bench"
ID_STRIDE = 10_000_000


def make(copies: int, source: Path = SOURCE) -> Path:
    """The path of the trace of ``copies`` copies of ``source`` (built once)."""
    out = CACHE / f"{source.name.split('.')[0]}_x{copies}.json.gz"
    if out.exists():
        return out
    doc = orjson.loads(gzip.decompress(source.read_bytes()))
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))) - min(ts) + 1000
    parts = []
    for k in range(copies):
        shift, ids = k * span, k * ID_STRIDE
        for e in events:
            if e.get("ph") == "M" and k:
                continue
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + shift
            if "id" in e2 and isinstance(e2["id"], int):
                e2["id"] += ids
            a = e2.get("args")
            if isinstance(a, dict):
                a = dict(a)
                for key in ("correlation", "External id", "Ev Idx"):
                    if isinstance(a.get(key), int):
                        a[key] += ids
                e2["args"] = a
            parts.append(e2)
    doc["traceEvents"] = parts
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=6))
    tmp.replace(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=38)
    args = ap.parse_args()
    path = make(args.copies)
    print(path, f"{path.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
