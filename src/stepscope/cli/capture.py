"""``stepscope capture``: record a window of a running process, on demand.

The window is recorded by the program's control server (``record.control``) when it has one, else sampled from
outside with py-spy (``program.pyspy``, ``--duration`` only). ``--pid`` may be the program's, its ``stepscope run``'s
or any parent's: the one descendant that published a server (``program.client.locate``; several: one line names
them), and for py-spy the one program under stepscope's launcher, else the one Python program below it
(``pyspy.target``). A job (the server under the pid and the servers below it: ``run --server`` following children
that start servers of their own, ``program.client.locate_job``) is captured at once and joined into one run
(``capture_job``: the other windows made process runs of the top one's, with the facts each server published).
Messages name the program, not stepscope's launcher.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import click

from ..core import limits
from ..core import procs
from ..program.client import CaptureError, app_of, capture, find_server, locate_job, parse_duration, pid_alive
from ..record.control import DEFAULT_TIMEOUT_S, span_traced
from ..record.settings import DEFAULT_HZ, check_flags
from .common import JsonOpt, StoreOpt, UserError, command, err, fail, handles_errors, open_store, print_json


@command("capture")
@click.option("--pid", type=int, default=None, help="The process to capture: the program, its `stepscope run`, or a "
              "shell or script above them.")
@click.option("--address", default=None, help="HOST:PORT of its control server.")
@click.option("--duration", default=None, help="Window length: 10s, 500ms, 2m.")
@click.option("--steps", type=int, default=None, help="End after N completed calls of --span.")
@click.option("--span", default=None, help="The span counted by --steps (name or suffix).")
@click.option("--trace", "-t", multiple=True, help="Qualified name to trace during the window.")
@click.option("--hz", type=float, default=DEFAULT_HZ, help="Sampling rate (samples/s per thread).")
@click.option("--timeout", default=None, help="End the window after this long whatever happens (stored as timeout). "
              "[default: 10m, or --duration if longer]")
@click.option("--device-trace", is_flag=True, default=False, help="Also record the torch profiler timeline.")
@StoreOpt
@JsonOpt
@handles_errors
def capture_cmd(pid: Optional[int], address: Optional[str], duration: Optional[str], steps: Optional[int],
                span: Optional[str], trace: tuple[str, ...], hz: float, timeout: Optional[str], device_trace: bool,
                store: Optional[Path], as_json: bool) -> None:
    """Capture a window of a running program: traces on, sampler on, then everything off again.

    The program runs under `stepscope run --server`, calls stepscope.start_server() (or runs with
    STEPSCOPE_SERVER=1); a process with no server is sampled from outside with py-spy (--duration only).
    --pid may name the program, its `stepscope run`, or a process above them: the one program below it
    with a server (or, for py-spy, the one Python program) is captured."""
    from rich.markup import escape

    if (pid is None) == (address is None):
        raise UserError("give --pid PID or --address HOST:PORT")
    if pid is not None:
        limits.in_range("--pid", pid, 1, 2**22, integer=True)  # Linux's PID_MAX_LIMIT
    check_flags(profiles_hz=hz)
    if steps is not None:
        limits.in_range("--steps", steps, 1, 1_000_000, integer=True)
    if duration is None and steps is None:
        raise UserError("give --duration (e.g. 10s) or --steps N --span NAME")
    if steps is not None and (steps < 1 or not span):
        raise UserError("--steps needs N >= 1 and --span NAME")
    if span and not span_traced(span, list(trace)):
        raise UserError(f"--span {span} is not traced in the window: name it in full (pkg.mod.Class.method) "
                        f"or --trace it (e.g. --trace pkg.mod.{span})")
    window = parse_duration(duration) if duration else None
    timed_out = False
    limit = parse_duration(timeout, "--timeout") if timeout else max(DEFAULT_TIMEOUT_S, window or 0)
    try:
        job = locate_job(pid) if pid is not None else [i for i in [find_server(None, address)] if i is not None]
    except CaptureError as e:
        raise UserError(str(e)) from None
    info = job[0] if job else None
    t0 = time.perf_counter()
    if info is None:
        if address is not None:
            raise UserError(f"no stepscope control server known at {address}")
        if not pid_alive(pid):
            raise UserError(f"no process {pid}")
        from ..program.pyspy import PySpyError, record, target

        try:
            app_pid = target(pid)  # the Python program below a `stepscope run` or a shell
        except PySpyError as e:
            raise UserError(str(e)) from None
        app = procs.label_of(app_pid, 60)
        if window is None or device_trace:
            raise UserError(f"process {app_pid} ({app}) started no stepscope server: --steps and --device-trace need "
                            "one (`stepscope run --server`); py-spy takes --duration")
        if hz == 0:
            raise UserError(f"--hz: must be between 1 and {limits.HZ_MAX} for py-spy (process {app_pid} ({app}) started "
                            "no stepscope server: sampling is all that can be recorded), got 0")
        st = open_store(store, create=True)
        if not as_json:
            err.print(f"sampling {escape(app)} (pid {app_pid}{_under(app_pid, pid)}) with py-spy for {window:g} s: "
                      "it runs no stepscope server...")
        try:
            run_id = record(app_pid, window, hz, st)
        except PySpyError as e:
            raise UserError(str(e)) from None
        store_path = st.path
    else:
        request = {"traces": list(trace), "hz": hz, "duration_s": window, "steps": steps, "span": span,
                   "device_trace": device_trace, "timeout_s": limit}
        if not as_json:
            more = f" and {len(job) - 1} processes below it ({', '.join(str(i['pid']) for i in job[1:])})" \
                if len(job) > 1 else ""
            err.print(f"capturing {escape(app_of(info))} (pid {info['pid']}{_under(int(info['pid']), pid)}){more}...")
        try:  # the server ends the window by the timeout; the rest bounds writing it out
            reply = capture_job(job, request, on_recording=(lambda r: err.print(f"recording run {r['run_id']}"))
                                if not as_json else None, timeout=limit + 120)
        except CaptureError as e:
            raise UserError(str(e)) from None
        run_id, store_path = reply["run_id"], Path(reply["store"])
        timed_out = reply.get("reason") == "timeout"
    from ..analysis.calltree import ProfileIndex
    from ..analysis.summary import summarize
    from ..output.terminal.summary import print_summary
    from ..store.reader import load_run

    st = open_store(store_path)
    data = load_run(st, run_id)  # spans as columns: no object per span
    summary = summarize(data, ProfileIndex(data.profile))
    elapsed = time.perf_counter() - t0
    if as_json:
        print_json({"run": summary.to_dict(), "store": str(store_path), "seconds": elapsed})
    else:
        print_summary(summary, err)
        err.print(f"[dim]stored in {store_path}; capture to summary {elapsed:.2f} s[/dim]")
    if info is not None and timed_out:
        what = f"{reply.get('steps_done', 0)} of {steps} steps of {span}" if steps else "the window"
        fail(f"capture timed out after {limit:g} s with {what}; run {run_id} stored as timeout", 1)


def _under(found: int, given: int | None) -> str:
    """``, below pid N`` when the process captured is not the one the user named."""
    return f", below pid {given}" if given is not None and found != given else ""


def capture_job(job: list[dict], request: dict, on_recording=None, timeout: float | None = None) -> dict:
    """Capture the servers of ``job`` (``program.client.locate_job``: the top program first) at once, each window a
    run in its program; then the others' runs become process runs of the top one's (``runs.parent_run``, with each
    process's facts: its rank...), so that the window reads as one run of the job (``store.jobjoin``). Returns the
    top's final reply. Raises CaptureError (the first met) after joining what was captured."""
    if len(job) == 1:
        return capture(job[0], request, on_recording, timeout)
    import threading

    replies: list = [None] * len(job)

    def one(k: int) -> None:
        try:
            replies[k] = capture(job[k], request, on_recording if k == 0 else None, timeout)
        except CaptureError as e:
            replies[k] = e

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(len(job))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    top = replies[0]
    if isinstance(top, CaptureError):
        raise top
    st = open_store(Path(top["store"]))
    try:
        for info, r in zip(job[1:], replies[1:]):
            if isinstance(r, dict) and r.get("run_id") and Path(r["store"]).resolve() == Path(top["store"]).resolve():
                st.update_run(r["run_id"], parent_run=top["run_id"], process=dict(info.get("facts") or {}))
    finally:
        st.close()
    failed = [r for r in replies[1:] if isinstance(r, CaptureError)]
    if failed:
        raise CaptureError(f"{failed[0]} (the other processes' windows are stored in run {top['run_id']})")
    return top
