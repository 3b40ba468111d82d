"""Sample a process that started no server from outside, with py-spy (PyPI ``py-spy``), and store the
result as a stepscope run.

``py-spy record --format speedscope`` writes one sampled profile per thread (speedscope's file format:
a shared frame table, stacks root first, a weight per sample, in time order). Samples get timestamps
by accumulating the weights from the window's start (py-spy records no per-sample time); frames keep
py-spy's function name, file and line.

The pid given may be a parent of the program (``stepscope run``, a shell): ``target`` picks the program
below it. The run's command is the program's own (``procs.app_command``: stepscope's launcher left out).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..core import clock
from ..core.model import Capture, Run, RunMeta
from ..record.session import new_run_id
from ..store.db import Store
from ..core import procs


class PySpyError(Exception):
    """py-spy missing, or refused (ptrace permission), with its one-line reason."""


def pyspy_path() -> str | None:
    exe = shutil.which("py-spy")
    if exe is None:
        import sys

        cand = Path(sys.executable).parent / "py-spy"
        exe = str(cand) if cand.exists() else None
    return exe


def target(pid: int) -> int:
    """The Python program to sample for ``pid``: ``pid`` when it runs under stepscope's launcher; else the one
    process below it that does (``pid`` is ``stepscope run`` or a shell above it); else ``pid`` when it is a
    Python process; else the one Python process below it; else ``pid`` (py-spy says why not). Raises
    PySpyError naming them when several are below it."""
    argv = procs.cmdline(pid)
    if procs.runs_launcher(argv):
        return pid
    me = os.getpid()  # (`stepscope capture --pid $$` from a shell: this process is below it too)
    below = [c for c in procs.descendants(pid) if c != me and not procs.is_descendant(c, me)]
    for pick in (procs.runs_launcher, procs.is_python):
        if pick is procs.is_python and procs.is_python(argv):
            return pid
        found = [c for c in below if pick(procs.cmdline(c))]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            which = ", ".join(f"{c} ({procs.label_of(c, 60)})" for c in found[:8]) + (" ..." if len(found) > 8 else "")
            raise PySpyError(f"several Python programs under pid {pid}: {which}; give one of them with --pid")
    return pid


def record(pid: int, duration_s: float, hz: float, store: Store) -> str:
    """Sample ``pid`` for ``duration_s`` at ``hz`` with py-spy; store and return the run id."""
    exe = pyspy_path()
    if exe is None:
        raise PySpyError(f"process {pid} ({procs.label_of(pid, 60)}) started no stepscope server, and py-spy is not "
                         "installed to sample it from outside (pip install py-spy)")
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "p.json"
        anchor = clock.Anchor.take()
        p = subprocess.run([exe, "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s))), "--rate",
                            str(int(hz)), "--format", "speedscope", "--output", str(out), "--nonblocking", "--threads"],
                           capture_output=True, text=True)
        if p.returncode != 0 or not out.exists():
            why = (p.stderr.strip().splitlines() or ["py-spy failed"])[-1]
            if "ermission" in why or "ptrace" in why.lower():
                why += " (sampling another process needs ptrace: run as the same user with kernel.yama.ptrace_scope=0, or as root)"
            raise PySpyError(f"py-spy could not sample pid {pid} ({procs.label_of(pid, 60)}): {why}")
        doc = json.loads(out.read_text())
    return _store(doc, pid, hz, anchor, store)


def _store(doc: dict, pid: int, hz: float, anchor: clock.Anchor, store: Store) -> str:
    frames = [(f.get("name", "?"), "", f.get("file", ""), int(f.get("line") or 0)) for f in doc["shared"]["frames"]]
    stacks: dict[tuple, int] = {}
    samples = []
    threads = {}
    unit_ns = {"nanoseconds": 1, "microseconds": 1e3, "milliseconds": 1e6, "seconds": 1e9}
    for k, prof in enumerate(p for p in doc.get("profiles", []) if p.get("type") == "sampled"):
        tid = k + 1
        threads[tid] = (prof.get("name", f"thread {tid}"), None)
        scale = unit_ns.get(prof.get("unit"), 1e9 / hz)
        t = anchor.mono_ns
        for stack, w in zip(prof["samples"], prof["weights"]):
            key = tuple(stack)
            sid = stacks.setdefault(key, len(stacks))
            samples.append((int(t), tid, sid))
            t += w * scale
    command = procs.app_command(procs.cmdline(pid) or []) or [f"pid {pid}"]
    run_id = new_run_id()
    end = max([s[0] for s in samples], default=anchor.mono_ns)
    store.create_run(Run(id=run_id, command=command, pid=pid, status="ok", start_ns=anchor.mono_ns,
                         anchor_mono_ns=anchor.mono_ns, anchor_wall_ns=anchor.wall_ns,
                         settings={"profiles_hz": hz,
                                   "extra": RunMeta(capture=Capture(pid=pid, method="py-spy")).to_extra()}),
                     anchor.wall_ns)
    samples.sort()
    store.append(run_id, frames=frames, stacks=list(stacks), samples=samples, threads=threads)
    store.update_run(run_id, end_ns=end, status="ok", env={"sampled_by": "py-spy", "host_pid": os.getpid(),
                                                           "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    return run_id
