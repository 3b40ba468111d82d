"""A stored run sent to a back end: an OpenTelemetry collector (OTLP/HTTP) or Sentry (envelopes), for
``stepscope export --endpoint/--dsn`` and ``stepscope run --export``."""

from __future__ import annotations

from ...store.db import Store
from ...store.reader import load_parts

KINDS = ("otlp", "sentry")


def parse_target(spec: str) -> tuple[str, str | None]:
    """``--export`` as given: ``otlp`` (the environment's collector), ``otlp=URL`` or ``sentry=DSN`` -> (kind, URL or
    DSN). Raises ValueError naming ``--export``."""
    kind, _, where = spec.partition("=")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise ValueError(f"--export: expected otlp, otlp=URL or sentry=DSN, got {spec!r}")
    if kind == "sentry":
        from .sentry_out import parse_dsn

        if not where:
            raise ValueError("--export sentry: give the DSN as sentry=DSN")
        parse_dsn(where, "--export sentry")  # (checked before the program runs)
    return kind, where or None


def send_run(store: Store, run_id: str, kind: str, where: str | None, service: str | None = None,
             spans_per_event: int | None = None) -> str:
    """Send run ``run_id`` (each process run of its job as ``store.reader.load_parts`` gives it) to ``kind``
    ("otlp": a collector's base URL, None for the environment's; "sentry": a DSN). Returns the one line saying what
    was sent. Raises ``otlp_http.SendFailed`` (one line) when the receiver refused or could not be reached,
    ``StoreError`` when the run cannot be read, ValueError for a bad DSN."""
    if kind == "otlp":
        from .otlp_http import send

        sent = send(load_parts(store, run_id), run_id, service, where)
        return f"otlp: {sent.spans} spans of run {run_id} sent to {sent.endpoint} ({sent.requests} requests)"
    from .sentry_out import SPANS_PER_EVENT, envelopes, parse_dsn, send as send_envelopes

    dsn = parse_dsn(where or "")
    n = send_envelopes(envelopes(load_parts(store, run_id), run_id, dsn, service, spans_per_event or SPANS_PER_EVENT), dsn)
    return f"sentry: run {run_id} sent to {dsn.envelope_url} ({n} envelopes)"
