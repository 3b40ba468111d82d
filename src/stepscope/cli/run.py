"""``stepscope run``: run a Python program with named functions traced and its stacks sampled."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import click

from ..core import limits
from ..core.model import AutoTrace, RunMeta
from ..record.settings import DEFAULT_HZ, Settings, check_flags
from .tracefile import read_trace_file
from ..record.tracing import precheck
from ..record.tracing.resolve import normalize_targets
from .common import (PATH, JsonOpt, StoreOpt, UserError, argument, command, err, handles_errors, open_store, print_json,
                     setting_option)

if TYPE_CHECKING:
    from ..program.run import Outcome

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


def _early_unresolved(command: list[str], names) -> dict[str, str]:
    """Names certain not to resolve (``tracing.precheck``), when the program runs on this interpreter (its
    modules are the ones found here); {} otherwise."""
    if not command or not names:
        return {}
    exe = shutil.which(command[0]) or command[0]
    if os.path.abspath(exe) != os.path.abspath(sys.executable):
        return {}
    script = next((a for a in command[1:] if not a.startswith("-")), None)
    extra = [os.path.dirname(os.path.abspath(script))] if script and script.endswith(".py") else [os.getcwd()]
    return precheck.check(list(names), extra)


def record(command: list[str], traces: list[str], hz: float, store_path: Optional[Path], as_json: bool,
           quiet: bool = False, transaction: str | None = None, meta: RunMeta | None = None,
           json_file: Optional[Path] = None, report_hint_by_caller: bool = False,
           options: Settings | None = None) -> Outcome:
    """Run and record ``command``; print its summary (stderr) or JSON (stdout); with ``json_file``, also
    write the JSON document there. Shared with ``demo``.

    ``options``: the settings that the flags gave (the device trace, syncs, compile report, sampler, memory...;
    None: ``Settings``' defaults), with ``traces``, ``hz``, ``transaction`` and the run's facts ``meta`` (a job id,
    an auto-trace pass: ``core.model.RunMeta``) set here; ``report_hint_by_caller``: the caller prints where the report is (``demo`` writes it),
    so the summary leaves out its own "`stepscope report RUN`" line."""
    from ..analysis.calltree import ProfileIndex
    from ..analysis.summary import summarize
    from ..output.terminal.summary import print_summary, unresolved_line
    from ..program.run import CommandError, run_program  # (the recorder's parent side: not for --help)

    settings = dataclasses.replace(options or Settings(), functions_to_trace=tuple(normalize_targets(traces)),
                                   profiles_hz=hz, transaction=transaction, extra=(meta or RunMeta()).to_extra())
    if json_file is not None and not json_file.resolve().parent.is_dir():
        raise UserError(f"--json-file {json_file}: no folder {json_file.resolve().parent}")
    store = open_store(store_path, create=True)
    # (with the children followed, a `__main__` name may be another process's: said after the run, if no process had it)
    early = {n: why for n, why in _early_unresolved(command, settings.functions_to_trace).items()
             if not (settings.children and n.startswith("__main__."))}
    for name, why in early.items():  # before the program starts: the run itself would say it at the end
        err.print(unresolved_line(name, why))
    try:
        outcome = run_program(command, settings, store)
    except CommandError as e:
        raise UserError(str(e)) from None
    if not outcome.run_id:  # the program could not start: its one line is said, nothing is stored
        store.close()
        _emit({"run": None, "exit_code": outcome.exit_code}, as_json, json_file)
        return outcome
    if quiet and not (as_json or json_file):
        _tell_incomplete(store, outcome)
        from ..store.db import job_unresolved
        from ..record.tracing.globs import is_note

        top = store.get_run(outcome.run_id)
        for name, why in job_unresolved(top, store.process_runs(top.id)).items():  # -q still says what was not
            if name not in early and not is_note(why):  # traced (by any process of the job); notes (overrides,
                err.print(unresolved_line(name, why))  # compiled regions, a glob's members) are the first screen's
        store.close()
        return outcome
    from ..store.reader import load_run

    data = load_run(store, outcome.run_id)  # spans as columns: no object per span
    summary = summarize(data, ProfileIndex(data.profile))
    _emit({"run": summary.to_dict()}, as_json, json_file)
    if not as_json and not quiet:
        print_summary(summary, err)
        if not _tell_incomplete(store, outcome) and not report_hint_by_caller:
            err.print(f"[dim]stored in {store.path}; `stepscope report {outcome.run_id}` for the HTML report[/dim]")
    else:
        _tell_incomplete(store, outcome)
    store.close()
    return outcome


def _emit(doc: dict, as_json: bool, json_file: Optional[Path]) -> None:
    """The result document: on stdout (``--json``, after whatever the program printed there) and/or in
    ``json_file`` (written whole, then renamed into place)."""
    if as_json:
        print_json(doc)
    if json_file is not None:
        import orjson

        tmp = json_file.with_name(f".{json_file.name}.tmp")
        tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) + b"\n")
        tmp.replace(json_file)


def _tell_incomplete(store, outcome: Outcome) -> bool:
    """One line on stderr when the recording could not be written in full (a full disk); whether it was."""
    run = store.get_run(outcome.run_id)
    problem = outcome.store_error or (run.error if run.status == "incomplete" else None)
    if problem:
        spans, samples = store.counts(outcome.run_id)
        print(f"stepscope: {problem}; kept {spans} spans, {samples} samples up to the failure", file=sys.stderr)
    return bool(problem)


@command("run", context_settings=CONTEXT)
@argument("command", nargs=-1, help="The program: python SCRIPT [ARGS] (after --).")
@setting_option("functions_to_trace", [])
@click.option("--trace-file", type=PATH, default=None, help="TOML or text file of names to trace.")
@click.option("-m", "module", default=None, help="Run a module, like python -m.")
@setting_option("profiles_hz", None, help_tail=f" [default: {DEFAULT_HZ:g}]")
@StoreOpt
@JsonOpt
@click.option("--json-file", type=PATH, default=None, help="Write the JSON document to this file (--json prints it "
              "on stdout after the program's own output).")
@click.option("--quiet", "-q", is_flag=True, default=False, help="Print nothing after the program ends (with "
              "--server: not the line that says it is ready for capture either).")
@click.option("--auto-trace", type=int, default=0, help="Run twice: sample, then trace the top N suggestions too.")
@setting_option("device_trace")
@setting_option("device_steps")
@setting_option("device_stacks")
@setting_option("syncs")
@setting_option("compile_report")
@click.option("--server", is_flag=True, default=False, help="Record nothing; start the control server in the program "
              "and say when it is ready: `stepscope capture --pid` (this process's pid, the program's, or a parent's) "
              "records windows on demand.")
@setting_option("sampler")
@setting_option("memory")
@setting_option("memory_history")
@setting_option("children")
@setting_option("cuda_peaks")
@click.option("--export", multiple=True, help="Once the run is stored, send it (repeatable): otlp (to "
              "$OTEL_EXPORTER_OTLP_ENDPOINT), otlp=URL (a collector, OTLP/HTTP; spans only) or sentry=DSN (spans and "
              "samples). A failed send is one line on stderr; the run stays stored and the exit status is the "
              "program's.")
@setting_option("step_functions", [])
@setting_option("labels", [])
@setting_option("app")
@click.option("--job", default=None, help="A job id for the run (exported as stepscope.job.id): runs sent to one "
              "`stepscope serve` with the same id, from any host, are joined into one run. Default: torchrun's "
              "TORCHELASTIC_RUN_ID in its ranks.")
@click.pass_context
@handles_errors
def run(ctx: click.Context, command: tuple[str, ...], trace: tuple[str, ...], trace_file: Optional[Path],
        module: Optional[str], hz: Optional[float], store: Optional[Path], as_json: bool, json_file: Optional[Path],
        quiet: bool, auto_trace: int, device_trace: bool, device_steps: Optional[int], device_stacks: bool,
        syncs: bool, compile_report: bool, server: bool, sampler: str, memory: bool, memory_history: bool,
        children: bool, cuda_peaks: str, export: tuple[str, ...], step: tuple[str, ...], label: tuple[str, ...],
        app: Optional[str], job: Optional[str]) -> None:
    """Run a Python program with the named functions traced and every thread sampled.

    stepscope run --trace pkg.mod.Class.method -- python script.py --steps 20
    """
    import sys

    from ..program.run import CommandError, die_like, run_program

    check_flags(profiles_hz=hz)  # (by the settings' own rules, under the flags, before anything runs)
    limits.in_range("--auto-trace", auto_trace, 0, 50, integer=True)
    check_flags(sampler=sampler, cuda_peaks=cuda_peaks, device_steps=device_steps)
    if export:
        from ..output.export.send import parse_target

        targets = [parse_target(x) for x in export]  # (ValueError: one line naming --export, before the program runs)
    else:
        targets = []
    args = list(command or []) + list(ctx.args)
    if module:
        args = [sys.executable, "-m", module, *args]
    names = list(trace)
    file_hz = None
    steps_named, labels, preset = list(step), {}, app
    if trace_file is not None:
        tf = read_trace_file(trace_file)
        names += tf.names
        file_hz = tf.hz
        steps_named += [x for x in tf.steps if x not in steps_named]
        labels.update(tf.labels)
        preset = preset or tf.app
    try:
        labels.update(check_flags(labels=label).get("labels", {}))
        preset = check_flags(app=preset).get("app")
    except ValueError as e:
        raise UserError(str(e)) from None
    rate = hz if hz is not None else (file_hz if file_hz is not None else DEFAULT_HZ)
    options = Settings(device_trace=device_trace, device_stacks=device_stacks, device_steps=device_steps, syncs=syncs,
                       compile_report=compile_report, sampler=sampler, memory=memory, memory_history=memory_history,
                       cuda_peaks=cuda_peaks, children=children, step_functions=tuple(normalize_targets(steps_named)),
                       labels=labels, app=preset)
    if job is not None and not (0 < len(job) <= 200):
        raise UserError("--job: an id of 1 to 200 characters")
    if server:
        if names or auto_trace or options.device_trace or compile_report or syncs or targets or steps_named or preset:
            raise UserError("--server records nothing itself: name what to trace (and --export) in `stepscope capture`"
                            if not targets else "--export: not with --server (it records nothing itself)")
        st = open_store(store, create=True)
        try:
            outcome = run_program(args, Settings(profiles_hz=rate, sampler=sampler, children=children), st,
                                  server_only=True,
                                  on_server=None if quiet else _serving_line)
        except CommandError as e:
            raise UserError(str(e)) from None
        die_like(outcome.returncode)
        raise SystemExit(outcome.exit_code)
    if auto_trace > 0:
        outcome = _auto_trace(args, names, rate, store, as_json, quiet, auto_trace, options, json_file)
    else:
        outcome = record(args, names, rate, store, as_json, quiet, json_file=json_file, options=options,
                         meta=RunMeta(job=job))
    if targets and outcome.run_id:
        _export_run(store, outcome.run_id, targets, quiet)
    die_like(outcome.returncode)  # a program killed by a signal: stepscope dies by it too, as python would
    raise SystemExit(outcome.exit_code)


def _export_run(store_path: Optional[Path], run_id: str, targets: list[tuple[str, str | None]], quiet: bool) -> None:
    """``--export``: send the stored run to each target (``export.send.send_run``); what was sent is a line on stderr
    (not with ``-q``), a failure one line on stderr: never the exit status, never the stored run."""
    from ..output.export.otlp_http import SendFailed
    from ..output.export.send import send_run
    from ..store.db import StoreError

    st = open_store(store_path)
    try:
        for kind, where in targets:
            try:
                line = send_run(st, run_id, kind, where)
            except (SendFailed, StoreError, ValueError, OSError, ImportError) as e:
                print(f"stepscope: --export {kind}: {e}", file=sys.stderr)
                continue
            if not quiet:
                err.print(line, markup=False)
    finally:
        st.close()


def _serving_line(info: dict) -> None:
    """``stepscope run --server``: once the program's control server accepts captures (before the program's
    own code runs), one line on this process's stderr saying which program, its pid, and the command that
    captures it (by this process's pid, which ``$!`` gives). Written in one ``write``: never split by the
    program's output."""
    from ..program.client import app_of

    line = (f"stepscope: serving {app_of(info)} (pid {info['pid']}) for capture: "
            f"stepscope capture --pid {os.getpid()} --duration 10s\n")
    sys.stderr.flush()
    try:
        os.write(sys.stderr.fileno(), line.encode(errors="replace"))
    except (OSError, ValueError, AttributeError):  # (a stderr with no descriptor)
        sys.stderr.write(line)
        sys.stderr.flush()


def _auto_trace(args: list[str], names: list[str], rate: float, store_path: Optional[Path], as_json: bool, quiet: bool,
                n: int, options: Settings, json_file: Optional[Path] = None) -> Outcome:
    """Run once sampled, pick the top ``n`` suggestions, run again with them traced (and ``options``); link both
    runs."""
    from ..analysis.suggest import suggest
    from ..store.reader import load_run

    first = record(args, names, rate, store_path, False, quiet=True, meta=RunMeta(auto_trace=AutoTrace(1)))
    if not first.run_id:
        return first
    st = open_store(store_path)
    picks = [s.qualified_name for s in suggest(load_run(st, first.run_id), top=n)]
    if not quiet and not as_json:
        err.print(f"auto-trace: run {first.run_id} sampled; tracing next: {', '.join(picks) or '(nothing to add)'}")
    second = record(args, names + picks, rate, store_path, as_json, quiet, json_file=json_file,
                    meta=RunMeta(auto_trace=AutoTrace(2, first_run=first.run_id, added=picks)), options=options)
    run = st.get_run(first.run_id)
    st.update_run(first.run_id, settings=RunMeta(auto_trace=AutoTrace(1, second_run=second.run_id,
                                                                      added=picks)).into(run.settings))
    st.close()
    return second
