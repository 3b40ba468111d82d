"""A job's processes as the trace viewers group them: each process of a joined run (``store.jobjoin``: the top
program and its process runs) with its own OS pid and a name (``rank N`` for a torch.distributed rank, else its
command), and each thread under its own name (the joined names' process label taken off), as Kineto's per-rank
traces are laid out. For the Chrome export (one ``pid`` and a ``process_name`` per process) and speedscope (the
process's name on each of its profiles)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.jobids import LABEL_SEP, process_index
from ...core.model import Run, RunData

#: pids given to a process without one, or whose pid another process of the job has (another host's): above
#: Linux's largest pid (pid_max is at most 2**22)
SPARE_PID_BASE = 1 << 22


@dataclass(frozen=True, slots=True)
class ExportProcess:
    """Process ``index`` of a run (0: the top program, k: ``data.processes[k - 1]``): its ``pid`` in the export,
    ``name``, and ``label``, how the joined thread names begin (``jobjoin.process_label``; "" for the top program)."""

    index: int
    pid: int
    name: str
    label: str


def process_name(run: Run) -> str:
    """A process's name in an export: ``rank N`` for a torch.distributed rank, else its command (80 characters at
    most), else ``pid P``."""
    rank = (run.process or {}).get("rank")
    if rank is not None:
        return f"rank {rank}"
    return " ".join(run.command or [])[:80] or f"pid {run.pid}"


def export_processes(data: RunData) -> list[ExportProcess]:
    """The run's processes, in the joined run's order (``jobids.process_index``), each with a pid of its own: its
    OS pid where no earlier process of the job has it, else one above every OS pid (``SPARE_PID_BASE``)."""
    from ...store.jobjoin import process_label

    runs = [data.run, *(data.processes or [])]
    used: set[int] = set()
    out = []
    for k, run in enumerate(runs):
        pid = int(run.pid or 0)
        if pid <= 0 or pid in used:
            pid = SPARE_PID_BASE + k
        used.add(pid)
        if k == 0:
            name = f"stepscope run {run.id}: {' '.join(run.command)[:80]}"
            if "rank" in (run.process or {}):
                name = process_name(run)
        else:
            name = process_name(run)
        out.append(ExportProcess(k, pid, name, process_label(run) if k else ""))
    return out


class ThreadProcesses:
    """Per thread id of a joined run: its process (``ExportProcess``) and its own name."""

    def __init__(self, data: RunData) -> None:
        self.processes = export_processes(data)
        self._names = data.profile.thread_names

    def process_of(self, thread: int) -> ExportProcess:
        """The process ``thread`` belongs to (a thread of an unknown process: the top program's)."""
        k = int(process_index(np.array([thread]))[0])
        return self.processes[k] if 0 <= k < len(self.processes) else self.processes[0]

    def thread_name(self, thread: int) -> str:
        """The thread's own name, without its process's label (``MainThread``, not ``rank 0 (pid 42) · MainThread``)."""
        name = self._names.get(thread, str(thread))
        label = self.process_of(thread).label
        return name[len(label) + len(LABEL_SEP):] if label and name.startswith(label + LABEL_SEP) else name
