"""``stepscope export``: a run as speedscope or Chrome trace JSON, as OTLP/JSON traces, or sent to an OpenTelemetry
collector (OTLP/HTTP) or to Sentry (envelopes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import click

from .common import PATH, JsonOpt, StoreOpt, UserError, argument, command, err, fail, handles_errors, open_store, out, \
    print_json

_SUFFIX = {"speedscope": ".speedscope.json", "chrome": ".trace.json", "otlp": ".otlp.json"}
#: the formats written to a file (``output.export.FORMATS``, checked equal by a test) and the two sent
_ALL = ("speedscope", "chrome", "otlp", "sentry")


@command("export")
@argument("run_id", required=False, help="Run id or prefix (default: the last run).")
@click.option("--format", "-f", "fmt", default="speedscope", help="speedscope, chrome, otlp or sentry.")
@click.option("-o", "--output", type=PATH, default=None, help="Output file; - for stdout.")
@click.option("--endpoint", default=None, help="otlp: send to this collector over OTLP/HTTP (protobuf, to "
              "URL/v1/traces). Without it and without -o, to $OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT when set.")
@click.option("--dsn", default=None, envvar="SENTRY_DSN", show_envvar=True, show_default=False,
              help="sentry: the project's DSN (Sentry, Spotlight's sidecar, or `stepscope serve`: `stepscope keys "
              "add`).")
@click.option("--service", default=None, help="otlp, sentry: service.name (default: the program's script or module).")
@click.option("--spans-per-event", type=int, default=1000, help="sentry: spans per transaction event; more continue "
              "in further events of the same trace.")
@StoreOpt
@JsonOpt
@handles_errors
def export(run_id: Optional[str], fmt: str, output: Optional[Path], endpoint: Optional[str], dsn: Optional[str],
           service: Optional[str], spans_per_event: int, store: Optional[Path], as_json: bool) -> None:
    """Export a run (spans and samples) to speedscope or Chrome trace / Perfetto JSON (with the device
    timeline when the run recorded one), its spans as OpenTelemetry traces (OTLP/JSON file or OTLP/HTTP; samples
    are left out: OTLP profiles are still alpha), or spans and samples to Sentry (a transaction per process and
    its profile chunks)."""
    if fmt not in _ALL:
        raise UserError(f"--format: expected one of {', '.join(_ALL)}, got {fmt!r}")
    if endpoint is not None and fmt != "otlp":
        raise UserError("--endpoint: only with --format otlp")
    if fmt == "sentry" and not dsn:
        raise UserError("--format sentry: give --dsn DSN (or set SENTRY_DSN)")
    if fmt == "sentry" and output is not None:
        raise UserError("-o: --format sentry sends envelopes to --dsn; it writes no file")
    if fmt == "sentry" or (fmt == "otlp" and (endpoint or (output is None and _env_collector()))):
        return _send(run_id, fmt, endpoint if fmt == "otlp" else dsn, service, spans_per_event, store, as_json)
    st = open_store(store)
    if fmt == "otlp":
        return _write_otlp(st, run_id, output, service, as_json)
    from ..output.export import WRITERS
    from ..store.db import DEVICE_TRACE
    from ..store.reader import load_run

    data = load_run(st, run_id)
    device = None
    trace_file = st.run_file(data.run.id, DEVICE_TRACE)
    if fmt == "chrome" and trace_file.exists():
        from ..device.kineto import load
        from ..device.runview import clock_map

        trace = load(trace_file)
        device = (trace, clock_map(trace))
    write = WRITERS[fmt]

    def stream(fh) -> int:  # written as it is made: a million spans never sit in memory as one document
        return write(data, fh, device=device) if device else write(data, fh)

    _to_file(stream, output, data.run.id, fmt, as_json)


def _env_collector() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def _to_file(stream, output: Optional[Path], run_id: str, fmt: str, as_json: bool, extra: dict | None = None) -> None:
    """``stream(binary file) -> bytes`` written to ``output`` (``-``: stdout; None: ``stepscope-RUN.SUFFIX``)."""
    if output is not None and str(output) == "-":
        stream(sys.stdout.buffer)
        sys.stdout.buffer.write(b"\n")
        sys.stdout.buffer.flush()
        return
    path = output or Path(f"stepscope-{run_id}{_SUFFIX[fmt]}")
    with open(path, "wb") as fh:
        size = stream(fh)
    if as_json:
        print_json({"run_id": run_id, "format": fmt, "path": str(path), "bytes": size, **(extra or {})})
    else:
        out.print(f"{fmt}: {path} ({size / 2**20:.1f} MiB)")


def _write_otlp(st, run_id: Optional[str], output: Optional[Path], service: Optional[str], as_json: bool) -> None:
    from ..output.export.otlp_json import write_otlp_json
    from ..store.reader import load_parts

    rid = st.resolve_id(run_id)
    counts: dict = {}

    def stream(fh) -> int:
        counts["spans"], size = write_otlp_json(load_parts(st, rid), fh, rid, service)
        return size

    _to_file(stream, output, rid, "otlp", as_json, counts)


def _send(run_id: Optional[str], fmt: str, where: Optional[str], service: Optional[str], spans_per_event: int,
          store: Optional[Path], as_json: bool) -> None:
    """Send the run; a receiver that refuses or cannot be reached: its one line, exit status 1."""
    from ..output.export.otlp_http import SendFailed
    from ..output.export.send import send_run

    if spans_per_event < 1:
        raise UserError(f"--spans-per-event: must be at least 1, got {spans_per_event}")
    st = open_store(store)
    rid = st.resolve_id(run_id)
    try:
        line = send_run(st, rid, fmt, where, service, spans_per_event)
    except SendFailed as e:
        fail(str(e), 1)
    if as_json:
        print_json({"run_id": rid, "format": fmt, "sent": line})
    else:
        err.print(line, markup=False)
