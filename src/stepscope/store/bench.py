"""Benchmark results in the run store: one ``bench`` row per benchmark, one ``bench_runs`` row per run
(warm-up or timed repeat), written as each run finishes so that an interrupted benchmark keeps them."""

from __future__ import annotations

import json
import time

from .db import Store, StoreError
from .schema import BENCH as SCHEMA  # the layout lives in store/schema.py



def _ensure(store: Store) -> None:
    store.conn.executescript(SCHEMA)


def create(store: Store, bench_id: str, spec: dict, labels: list[str]) -> None:
    _ensure(store)
    store.conn.execute("INSERT INTO bench VALUES (?,?,?,?,?,?,?)", (bench_id, time.time_ns(), json.dumps(spec), "{}",
                                                                     "running", json.dumps(labels), "{}"))


def add_run(store: Store, bench_id: str, config: int, repeat: int, warmup: bool, wall_s: float | None,
            steps: list[float] | None = None, peak_bytes: int | None = None, error: str | None = None) -> None:
    store.conn.execute("INSERT INTO bench_runs VALUES (?,?,?,?,?,?,?,?)",
                       (bench_id, config, repeat, int(warmup), wall_s, json.dumps(steps or []), peak_bytes, error))


def update(store: Store, bench_id: str, **fields) -> None:
    cols = ", ".join(f"{k} = ?" for k in fields)
    vals = [json.dumps(v) if isinstance(v, (dict, list)) else v for v in fields.values()]
    store.conn.execute(f"UPDATE bench SET {cols} WHERE id = ?", (*vals, bench_id))


def resolve(store: Store, ref: str | None) -> str:
    """A bench id from a full id, a unique prefix, or None / "last". Raises StoreError."""
    _ensure(store)
    if ref in (None, "", "last"):
        row = store.conn.execute("SELECT id FROM bench ORDER BY created_wall_ns DESC LIMIT 1").fetchone()
        if row is None:
            raise StoreError(f"no benchmarks in store {store.path} (run `stepscope bench sd` first)")
        return row[0]
    rows = [r[0] for r in store.conn.execute("SELECT id FROM bench WHERE id LIKE ? || '%' LIMIT 3", (ref,))]
    if ref in rows:
        return ref
    if len(rows) != 1:
        raise StoreError(f"no single benchmark matches {ref!r} in store {store.path}")
    return rows[0]


def list_benches(store: Store) -> list[dict]:
    """Every benchmark, newest first: ``{"id", "created_wall_ns", "status", "labels", "kind", "command"}``
    (``labels``: one per configuration; ``kind``: the spec's, "sd", "command", "try"...; ``command``: the program's
    words or None). Raises StoreError for an unreadable store."""
    with store._reading():
        _ensure(store)
        rows = store.conn.execute("SELECT id, created_wall_ns, status, labels, spec FROM bench "
                                  "ORDER BY created_wall_ns DESC").fetchall()
    out = []
    for r in rows:
        spec = json.loads(r[4] or "{}")
        out.append({"id": r[0], "created_wall_ns": r[1], "status": r[2], "labels": json.loads(r[3] or "[]"),
                    "kind": spec.get("kind"), "command": spec.get("command")})
    return out


def load(store: Store, bench_id: str) -> dict:
    """``{"id", "spec", "env", "status", "labels", "notes", "runs": [...]}`` for one benchmark."""
    _ensure(store)
    row = store.conn.execute("SELECT id, created_wall_ns, spec, env, status, labels, notes FROM bench WHERE id = ?",
                             (bench_id,)).fetchone()
    if row is None:
        raise StoreError(f"no benchmark {bench_id!r} in store {store.path}")
    runs = [{"config": r[0], "repeat": r[1], "warmup": bool(r[2]), "wall_s": r[3], "steps_s": json.loads(r[4] or "[]"),
             "peak_bytes": r[5], "error": r[6]}
            for r in store.conn.execute("SELECT config, repeat, warmup, wall_s, steps, peak_bytes, error FROM bench_runs "
                                        "WHERE bench_id = ? ORDER BY rowid", (bench_id,))]
    return {"id": row[0], "created_wall_ns": row[1], "spec": json.loads(row[2]), "env": json.loads(row[3]),
            "status": row[4], "labels": json.loads(row[5]), "notes": json.loads(row[6] or "{}"), "runs": runs}
