"""Which two runs ``stepscope diff`` (and the compare page) compares: ``pick_runs``, the default pair being the
newest run and the newest run before it of the same command (``program_key``) among the ``EARLIER_RUNS`` runs
before it; where a run's device trace lies (``device_trace_path``); and the diff of two stored runs
(``diff_stored``)."""

from __future__ import annotations

import os

from .diff import DiffError


def program_key(command: list[str]) -> str:
    """What makes two runs "the same command": the script or module run (the interpreter and the
    program's own arguments left out), a notebook cell (``%%stepscope LABEL``), or the first word."""
    if not command:
        return ""
    if command[0] == "%%stepscope" and len(command) > 1:  # a notebook cell's runs (``notebook.magics``): its label
        return " ".join(command[:2])
    head = os.path.basename(command[0])
    if head.startswith("python") and len(command) > 1:
        rest = command[1:]
        if rest[0] in ("-m", "-c") and len(rest) > 1:
            return " ".join(rest[:2])
        return rest[0]
    return command[0]


#: how many runs before B ``pick_runs`` looks through for one of the same program (else the one just before B)
EARLIER_RUNS = 500


def pick_runs(store, ref_a: str | None = None, ref_b: str | None = None) -> tuple[str, str]:
    """The run ids to compare, ``(A, B)``. Both given: as given (ids or prefixes; not one run twice). Only
    ``ref_a``: A against the newest run. Neither: B is the newest run and A the newest run before it of the same
    command (``program_key``), else the run just before it. Only ``ref_b``: A is chosen for B the same way.
    Raises StoreError for an unknown id, DiffError when the store holds fewer than two runs."""
    b = store.resolve_id(ref_b)
    if ref_a:
        a = store.resolve_id(ref_a)
        if a == b:
            raise DiffError(f"A and B are the same run ({a}): name the run to compare it with" if ref_b else
                            f"run {a} is the newest run: name the run to compare it with (stepscope diff {a[:15]} RUN_B)")
        return a, b
    key = program_key(store.get_run(b).command)
    earlier = store.runs_before(b, EARLIER_RUNS)
    if not earlier:
        raise DiffError(f"run {b} has no earlier run to compare with: record another (stepscope run ...) or name two runs")
    same = next((rid for rid, command in earlier if program_key(command) == key), None)
    return same or earlier[0][0], b


def device_trace_path(store, run_id: str) -> str | None:
    """The run's device trace file (``Store.run_file(run_id, DEVICE_TRACE)``), or None without one."""
    from ..store.db import DEVICE_TRACE

    p = store.run_file(run_id, DEVICE_TRACE)
    return str(p) if p.exists() else None


def diff_stored(store, ref_a: str | None = None, ref_b: str | None = None, span: str | None = None):
    """``analysis.diff.Diff`` of two stored runs of ``store`` (a ``store.db.Store``): ``ref_a`` (before) and ``ref_b``
    (after) as ``pick_runs`` reads them, their spans as columns (``store.reader.load_run``), their device traces when
    recorded. What ``stepscope diff`` and the notebook's ``%stepscope_diff`` show. Raises DiffError (nothing to
    compare: one line) and StoreError (an unknown run)."""
    from ..store.reader import load_run
    from .diff import diff_runs

    a_id, b_id = pick_runs(store, ref_a, ref_b)
    a, b = load_both(store, a_id, b_id)
    return diff_runs(a, b, span, device_trace_path(store, a_id), device_trace_path(store, b_id))


def load_both(store, a_id: str, b_id: str) -> tuple:
    """``load_run`` of two runs at once: B's in a thread of its own on a connection of its own (SQLite's reads and
    numpy's copies and sorts let go of the GIL, so two 10M-span runs load in about the time of one on two cores).
    Raises what ``load_run`` raises (A's first)."""
    import threading

    from ..store.db import Store
    from ..store.reader import load_run

    out: dict = {}

    def load_b() -> None:
        other = Store(store.path, create=False)
        try:
            out["b"] = load_run(other, b_id)
        except BaseException as e:  # (handed to the caller's thread)
            out["error"] = e
        finally:
            other.close()

    th = threading.Thread(target=load_b, name="stepscope-load", daemon=True)
    th.start()
    try:
        a = load_run(store, a_id)
    finally:
        th.join()
    if "error" in out:
        raise out["error"]
    return a, out["b"]
