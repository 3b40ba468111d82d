"""Run a benchmark matrix: each configuration in its own process, untimed warm-up, interleaved repeats.

Stable Diffusion configurations run in persistent workers (``bench.worker``), one per configuration,
all alive at once so that repeats interleave (A B C, A B C, ...) and machine drift hits all alike;
a worker's setup and warm-up are not timed (the first warm-up holds torch.compile's compile time,
reported apart). Commands run once per repeat in a fresh process, timed by this process.
Every finished run is written to the store at once: Ctrl-C keeps them all.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from typing import Callable

from ..store import bench as bench_store
from ..store.db import Store
from .spec import Spec

Progress = Callable[[str], None]


def new_bench_id() -> str:
    return "b" + time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(2).hex()


class _Worker:
    def __init__(self, cfg: dict) -> None:
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen([sys.executable, "-m", "stepscope.bench.worker", json.dumps(cfg)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            return {"error": f"worker exited with status {self.proc.wait()}"}
        try:
            return json.loads(line)
        except ValueError:
            return {"error": f"worker said {line.strip()[:200]!r}"}

    def ask(self, cmd: str) -> dict:
        try:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return {"error": "worker is gone"}
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run_bench(spec: Spec, store: Store, progress: Progress | None = None, bench_id: str | None = None) -> str:
    """Run ``spec``, recording into ``store``; returns the bench id. KeyboardInterrupt is caught: the
    benchmark is marked interrupted and keeps its finished runs."""
    bench_id = bench_id or new_bench_id()
    labels = [spec.label(i) for i in range(len(spec.configs))]
    bench_store.create(store, bench_id, spec.to_dict(), labels)
    say = progress or (lambda s: None)
    status = "ok"
    try:
        if spec.kind == "sd":
            _run_sd(spec, store, bench_id, say)
        else:
            _run_commands(spec, store, bench_id, say)
    except KeyboardInterrupt:
        status = "interrupted"
    bench_store.update(store, bench_id, status=status)
    return bench_id


def _run_sd(spec: Spec, store: Store, bench_id: str, say: Progress) -> None:
    workers: list[_Worker | None] = []
    env: dict = {}
    notes: dict = {"unavailable": {}, "errors": {}, "setup_s": {}, "warmup_s": {}}
    try:
        for i, cfg in enumerate(spec.configs):
            say(f"setting up {spec.label(i)}")
            w = _Worker(cfg)
            if "error" in w.hello:
                key = "unavailable" if w.hello.get("unavailable") else "errors"
                notes[key][i] = w.hello["error"]
                w.close()
                workers.append(None)
                continue
            env = w.hello.get("env", env)
            notes["setup_s"][i] = w.hello.get("setup_s")
            workers.append(w)
            for k in range(spec.warmup):
                say(f"warm-up {k + 1}/{spec.warmup}: {spec.label(i)}")
                r = w.ask("warmup")
                bench_store.add_run(store, bench_id, i, k, True, r.get("wall_s"), r.get("steps_s"), r.get("peak_bytes"),
                                    r.get("error"))
                notes["warmup_s"].setdefault(i, []).append(r.get("wall_s"))
        bench_store.update(store, bench_id, env=env, notes=notes)
        for rep in range(spec.repeats):
            for i, w in enumerate(workers):
                if w is None:
                    continue
                say(f"repeat {rep + 1}/{spec.repeats}: {spec.label(i)}")
                r = w.ask("run")
                bench_store.add_run(store, bench_id, i, rep, False, r.get("wall_s"), r.get("steps_s"), r.get("peak_bytes"),
                                    r.get("error"))
    finally:
        for w in workers:
            if w is not None:
                w.close()
        bench_store.update(store, bench_id, env=env, notes=notes)


def command_for(spec: Spec, i: int) -> list[str]:
    """The command line of configuration ``i``: ``{args}`` replaced by its argument set (shell-split)."""
    args = shlex.split(spec.configs[i]["args"])
    out: list[str] = []
    for part in spec.command:
        if part == "{args}":
            out.extend(args)
        else:
            out.append(part.replace("{args}", spec.configs[i]["args"]))
    return out


def recorded_steps(store_path: str) -> list[float] | None:
    """The denoising steps' wall times (s, in order, every call) of the last run in the scratch store, which is
    then deleted; None when it has no steps."""
    from ..analysis.steptable import step_table
    from ..store.db import Store as _Store
    from ..store.reader import load_run

    st = _Store(store_path)
    try:
        data = load_run(st, None)
        table = step_table(data.spans, max_rows=None)
        st.delete_run(data.run.id)
    except Exception:  # (no run written: the program failed to start)
        return None
    finally:
        st.close()
    return [r.wall_ns / 1e9 for r in table.rows] if table is not None else None


def _run_commands(spec: Spec, store: Store, bench_id: str, say: Progress) -> None:
    import platform

    bench_store.update(store, bench_id, env={"python": platform.python_version(), "cpu_count": os.cpu_count()})

    import tempfile

    scratch = tempfile.TemporaryDirectory(prefix="stepscope-bench-") if spec.record else None

    def once(i: int, rep: int, warm: bool) -> None:
        cmd = command_for(spec, i)
        if scratch is not None:  # recorded: its steps timed (sampling and the memory lane off: the least added)
            cmd = [sys.executable, "-m", "stepscope", "run", "-q", "--hz", "0", "--no-memory", "--store", scratch.name,
                   *spec.record, "--", *cmd]
        t = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t
        err = None if p.returncode == 0 else f"exit status {p.returncode}: {p.stderr.strip().splitlines()[-1:] }"
        steps = recorded_steps(scratch.name) if scratch is not None and err is None else None
        bench_store.add_run(store, bench_id, i, rep, warm, wall, steps, None, err)

    for i in range(len(spec.configs)):
        for k in range(spec.warmup):
            say(f"warm-up {k + 1}/{spec.warmup}: {spec.label(i)}")
            once(i, k, True)
    for rep in range(spec.repeats):
        for i in range(len(spec.configs)):
            say(f"repeat {rep + 1}/{spec.repeats}: {spec.label(i)}")
            once(i, rep, False)
