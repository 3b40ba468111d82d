"""The parent of ``stepscope try``: one process per configuration (``fixes.child``), interleaved repeats.

Order: the baseline starts first and, at the program's first pipeline call, says which of the asked fixes
apply (``catalog.check``); the others are "not applicable: why" and never run. Then each applicable fix alone,
then the combination of those that helped (a significantly faster denoising step, or call, within the
baseline's peak memory; of ``fixes.EXCLUSIVE`` the fastest). The baseline's process lives throughout; the
others run in groups as large as memory allows (the baseline's resident size, or its CUDA reservation, against
what is available), and within a group the repeats go round-robin (baseline, fix A, fix B, baseline, ...), so
that a machine's drift hits every configuration alike. Each finished run is written to the store at once
(``store.bench``: a benchmark of kind "try"); Ctrl-C keeps them. After the runs the outputs saved by the children
are compared with the baseline's (``verdict.output_change``) and each configuration's program output
(stdout) with the baseline's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..bench.matrix import new_bench_id
from ..program.run import child_argv
from ..store import bench as bench_store
from ..store.db import Store
from ..record.memory.history import proc_bytes
from . import label
from .child import ENV

Progress = Callable[[str], None]
#: share of the available memory the configurations' processes may take together
MEMORY_SHARE = 0.8


class TryError(RuntimeError):
    """The program could not be measured (it ended before a pipeline call, its warm-up failed...): one line."""


@dataclass(frozen=True)
class Plan:
    """What to run: the program (``command``: ``python SCRIPT ARGS``), the fixes asked for (``fixes`` names),
    timed calls per configuration (``repeats``), torch.compile's mode, the seed set before each call, and
    whether to measure the combination of the fixes that helped."""

    command: list[str]
    fixes: list[str]
    repeats: int = 5
    compile_mode: str = "default"
    seed: int = 0
    combine: bool = True


class Child:
    """One configuration's process: the program under ``fixes.child``, two pipes, stdout/stderr to files."""

    def __init__(self, argv: list[str], env: dict, cfg: dict, folder: Path, index: int) -> None:
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.index = index
        self.stdout_path = folder / f"{index}.stdout"
        self.stderr_path = folder / f"{index}.stderr"
        cfg = dict(cfg, cmd_fd=cmd_r, reply_fd=rep_w, config=index, out=str(folder))
        with self.stdout_path.open("wb") as so, self.stderr_path.open("wb") as se:
            self.proc = subprocess.Popen(argv, env=dict(env, **{ENV: json.dumps(cfg)}), stdin=subprocess.DEVNULL,
                                         stdout=so, stderr=se, pass_fds=(cmd_r, rep_w))
        os.close(cmd_r)
        os.close(rep_w)
        self.cmds = os.fdopen(cmd_w, "w")
        self.replies = os.fdopen(rep_r, "r")
        self.returncode: int | None = None

    def read(self) -> dict:
        """The child's next reply; ``{"error", "ended": True}`` once it ended without one."""
        line = self.replies.readline()
        if not line:
            code = self.proc.wait()
            tail = self.stderr_path.read_text(errors="replace").strip().splitlines()[-1:]
            said = f": {tail[0][:300]}" if tail else ""
            return {"error": f"the program ended (exit status {code}) before its first diffusers pipeline call "
                             f"was measured{said}", "ended": True}
        try:
            return json.loads(line)
        except ValueError:
            return {"error": f"the child said {line.strip()[:200]!r}"}

    def ask(self, cmd: str) -> dict:
        """Send ``cmd`` ("run") and read the reply."""
        try:
            self.cmds.write(cmd + "\n")
            self.cmds.flush()
        except (BrokenPipeError, OSError):
            return {"error": "the configuration's process is gone"}
        return self.read()

    def close(self, kill: bool = False) -> int:
        """``quit``: the program's own call runs and the program ends; returns its exit status."""
        if kill:
            self.proc.kill()
        try:
            self.cmds.write("quit\n")
            self.cmds.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        self.returncode = self.proc.wait()
        self.replies.close()
        return self.returncode


def group_size(ready: dict, available: int | None) -> int:
    """How many configurations besides the baseline may live at once: each takes what the baseline took (its
    RSS on the CPU, its CUDA reservation on a GPU), all together at most ``MEMORY_SHARE`` of what is free."""
    n = 64
    rss = ready.get("rss_bytes")
    if rss and available:
        n = min(n, int(MEMORY_SHARE * available / rss))
    if ready.get("cuda_reserved") and ready.get("cuda_free") is not None:
        n = min(n, int(MEMORY_SHARE * ready["cuda_free"] / ready["cuda_reserved"]))
    return max(1, n)


class _Session:
    def __init__(self, plan: Plan, store: Store, bench_id: str, say: Progress) -> None:
        self.plan, self.store, self.bench_id, self.say = plan, store, bench_id, say
        self.folder = store.path / "bench" / bench_id
        self.folder.mkdir(parents=True, exist_ok=True)
        self.argv = child_argv(plan.command, launcher="stepscope.fixes.child")
        self.link = tempfile.mkdtemp(prefix="stepscope-path-")  # this stepscope for the program's interpreter
        os.symlink(Path(__file__).resolve().parent.parent, Path(self.link) / "stepscope")
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [self.link, os.environ.get("PYTHONPATH")])))
        self.configs: list[list[str]] = []
        self.next_repeat: list[int] = []
        self.env_facts: dict = {}
        self.notes: dict = {"try": {"asked": plan.fixes, "compile_mode": plan.compile_mode, "seed": plan.seed,
                                    "not_applicable": {}, "applied": {}, "exit": {}, "folder": str(self.folder)},
                            "errors": {}, "unavailable": {}, "warmup_s": {}}
        self.children: list[Child] = []

    def spec(self) -> dict:
        return {"kind": "try", "configs": [{"fixes": c} for c in self.configs], "warmup": 1, "repeats": self.plan.repeats,
                "baseline": 0, "command": self.plan.command, "fixes": self.plan.fixes, "compile_mode": self.plan.compile_mode}

    def add(self, fixes: list[str]) -> int:
        self.configs.append(list(fixes))
        self.next_repeat.append(0)
        labels = [label(c) for c in self.configs]
        if len(self.configs) == 1:
            bench_store.create(self.store, self.bench_id, self.spec(), labels)
        else:
            bench_store.update(self.store, self.bench_id, spec=self.spec(), labels=labels)
        return len(self.configs) - 1

    def start(self, i: int, check: list[str] | None = None) -> tuple[Child | None, dict]:
        self.say(f"starting {label(self.configs[i])}")
        cfg = {"fixes": self.configs[i], "check": check, "compile_mode": self.plan.compile_mode, "seed": self.plan.seed}
        child = Child(self.argv, self.env, cfg, self.folder, i)
        self.children.append(child)
        checks = None
        reply = child.read()
        if "check" in reply:
            checks = reply["check"]
            reply = child.read()
        if checks is not None:
            reply["check"] = checks
        if "error" in reply:
            self.notes["errors"][str(i)] = reply["error"]
            bench_store.add_run(self.store, self.bench_id, i, 0, True, None, None, None, reply["error"])
            self.notes["try"]["exit"][str(i)] = child.close(kill=True)
            return None, reply
        self.env_facts = self.env_facts or reply.get("env", {})
        self.notes["try"]["applied"][str(i)] = reply.get("applied", {})
        self.notes["warmup_s"][str(i)] = [reply.get("warmup_s")]
        bench_store.add_run(self.store, self.bench_id, i, 0, True, reply.get("warmup_s"))
        return child, reply

    def timed(self, i: int, child: Child) -> None:
        self.say(f"repeat {self.next_repeat[i] + 1}: {label(self.configs[i])}")
        r = child.ask("run")
        if "output" in r:
            self.notes["try"].setdefault("outputs", {})[str(i)] = r["output"]
        bench_store.add_run(self.store, self.bench_id, i, self.next_repeat[i], False, r.get("wall_s"), r.get("steps_s"),
                            r.get("peak_bytes"), r.get("error"))
        self.next_repeat[i] += 1

    def phase(self, base: Child, todo: list[list[str]], size: int) -> None:
        for k in range(0, len(todo), size):
            live = [(0, base)]
            for fixes in todo[k:k + size]:
                i = self.add(fixes)
                child, _ = self.start(i)
                if child is not None:
                    live.append((i, child))
            self.save()
            for _ in range(self.plan.repeats):
                for i, child in live:
                    self.timed(i, child)
            for i, child in live[1:]:
                self.say(f"finishing {label(self.configs[i])}")
                self.notes["try"]["exit"][str(i)] = child.close()

    def save(self, **fields) -> None:
        bench_store.update(self.store, self.bench_id, env=self.env_facts, notes=self.notes, **fields)


def run_try(plan: Plan, store: Store, say: Progress | None = None) -> str:
    """Measure ``plan`` into ``store`` (a benchmark of kind "try"); returns its id. Raises TryError when the
    baseline cannot be measured (the benchmark is kept, status "failed"), CommandError (``runner``) for a
    command that is not a Python program. KeyboardInterrupt: status "interrupted", the finished runs kept."""
    from . import verdict

    s = _Session(plan, store, new_bench_id(), say or (lambda m: None))
    status = "ok"
    try:
        s.add([])
        base, ready = s.start(0, check=plan.fixes)
        if base is None:
            status = "failed"
            raise TryError(ready["error"])
        checks = ready.get("check") or {}
        s.notes["try"]["not_applicable"] = {f: why for f, why in checks.items() if why}
        applicable = [f for f in plan.fixes if f in checks and not checks[f]]
        size = group_size(ready, proc_bytes("/proc/meminfo", "MemAvailable"))
        s.notes["try"]["group"] = size
        s.phase(base, [[f] for f in applicable], size)
        combo = verdict.combination(bench_store.load(store, s.bench_id)) if plan.combine else []
        if len(combo) > 1:
            s.notes["try"]["combination"] = combo
            s.phase(base, [combo], 1)
        s.notes["try"]["exit"]["0"] = base.close()
        s.notes["try"]["compared"] = verdict.compare_outputs(s.folder, len(s.configs))
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        for child in s.children:
            if child.returncode is None:
                child.close(kill=True)
        shutil.rmtree(s.link, ignore_errors=True)
        if s.configs:
            s.save(status=status)
    return s.bench_id
