"""Deterministic cost figures for the benchmarks: a child process under Valgrind's callgrind, its measured regions
marked by the program itself (callgrind's client requests), counted per thread.

On a shared VM whose speed moves by 20% for seconds at a time, a 1% overhead cannot be read from wall times in a few
minutes; instruction counts and simulated cache misses of the same code on the same input do not move between runs.
The figure they give is a model, not a time: the cycle estimate of KCachegrind ("CEst" = Ir + 10 x (I1mr + D1mr +
D1mw) + 100 x (ILmr + DLmr + DLmw): instructions, first-level misses, last-level misses), with callgrind's own cache
model (two levels, the host's sizes). It leaves out what the model has no notion of (the second-level cache, the
branch predictor, other threads' use of the cores), so it is a companion of the wall-time figure, not its replacement.

Needs ``valgrind`` and its ``valgrind/callgrind.h`` (Debian's ``valgrind`` package) and ``gcc``: the child loads a
three-function library built from ``CONTROL`` (``control_library``) with ctypes. Under callgrind the child runs
~50x slower where it is measured (and ~5x elsewhere): measure a few steps.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

CONTROL = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void cg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); CALLGRIND_STOP_INSTRUMENTATION; }
"""
EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")
ENV = "STEPSCOPE_BENCH_CALLGRIND"  # the control library's path, in the child's environment


def missing() -> str | None:
    """Why this machine cannot run the callgrind mode (one line), or None."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed (Debian: apt install valgrind)"
    if not Path("/usr/include/valgrind/callgrind.h").exists():
        return "valgrind/callgrind.h is missing (Debian's valgrind package has it)"
    if shutil.which("gcc") is None:
        return "gcc is not installed"
    return None


def control_library(folder: Path) -> Path:
    """Build the client-request library (``CONTROL``) in ``folder``; its path. Raises CalledProcessError."""
    src, lib = folder / "cgctl.c", folder / "libcgctl.so"
    src.write_text(CONTROL)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return lib


def command(folder: Path) -> list[str]:
    """The valgrind prefix of the child's command: nothing measured until the child asks (``cg_start``), a dump per
    thread at each ``cg_dump``, the cache simulation on, the dumps in ``folder``."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes", "--cache-sim=yes",
            f"--callgrind-out-file={folder}/cg.%p"]


class Marks:
    """In the child: ``start()`` and ``dump(label)`` around a measured region (no-ops when ``ENV`` is unset)."""

    def __init__(self) -> None:
        path = os.environ.get(ENV)
        self.lib = None
        if path:
            import ctypes

            self.lib = ctypes.CDLL(path)

    def start(self) -> None:
        if self.lib is not None:
            self.lib.cg_start()

    def dump(self, label: str) -> None:
        if self.lib is not None:
            self.lib.cg_dump(label.encode())


def cest(s: dict) -> int:
    """KCachegrind's cycle estimate of a summary (``EVENTS`` -> count)."""
    return s["Ir"] + 10 * (s["I1mr"] + s["D1mr"] + s["D1mw"]) + 100 * (s["ILmr"] + s["DLmr"] + s["DLmw"])


def dumps(folder: Path, thread: int = 1) -> dict[str, tuple[Path, dict]]:
    """label -> (dump file, its summary) of ``thread``'s dumps in ``folder`` (callgrind's ``part`` files, thread 1:
    the main thread)."""
    out = {}
    for f in sorted(folder.glob("cg.*")):
        label = summary = None
        thr = None
        with open(f, errors="replace") as fh:
            for line in fh:
                if line.startswith("thread:"):
                    thr = int(line.split(":")[1])
                elif line.startswith("desc: Trigger: Client Request:"):
                    label = line.split("Client Request:", 1)[1].strip()
                elif line.startswith("summary:"):
                    summary = dict(zip(EVENTS, map(int, line.split(":")[1].split())))
        if thr == thread and label and summary:
            out[label] = (f, summary)
    return out


_FN = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(\S.*)$")


def functions(path: Path) -> dict[str, int]:
    """Self instructions (Ir) per function of one dump (``callgrind_annotate``'s table, the file:function names
    shortened to the file's last part)."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--show=Ir", str(path)], capture_output=True,
                         text=True).stdout
    got: dict[str, int] = {}
    for line in out.splitlines():
        m = _FN.match(line)
        if m and "PROGRAM TOTALS" not in line:
            name = m.group(2).split(" [")[0].rsplit("/", 1)[-1]
            got[name] = got.get(name, 0) + int(m.group(1).replace(",", ""))
    return got
