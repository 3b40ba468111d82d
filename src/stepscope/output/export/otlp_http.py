"""Send a run to an OpenTelemetry collector over OTLP/HTTP (protobuf), through OpenTelemetry's own exporter.

``send`` serializes ``export.otlp_encode.requests`` (at most ``otlp.BATCH`` spans a request, one process run each) and
hands each request's bytes to the HTTP client of ``opentelemetry-exporter-otlp-proto-http``'s ``OTLPSpanExporter``
(``Exporter``), which reads the standard variables: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_ENDPOINT`` (plus ``/v1/traces``), ``..._HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION``,
``..._CERTIFICATE`` (https://opentelemetry.io/docs/specs/otel/protocol/exporter/), compresses, and retries
429/502/503/504 and connection errors within the timeout. The exporter's ``export`` takes SDK ``ReadableSpan``s
only (one Python object per span, then its own encoder: ~20x slower than the messages built here), so the bytes
go through its client directly: ``_client.export`` (1.45 and later), or ``_export`` under its ``export``'s retry
loop (1.27 to 1.44). An explicit endpoint (``--endpoint URL``) is sent to ``URL/v1/traces``. The first batch the
collector refuses ends the export with ``SendFailed``: one line with the HTTP status and the collector's message
(its ``google.rpc.Status`` body, JSON or text), or why it could not be reached.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Iterable

from ...core.model import RunData
from . import otlp_encode as otlp

TRACES_PATH = "/v1/traces"
#: where the exporter sends when nothing says otherwise (the OTLP/HTTP default port)
DEFAULT_URL = "http://localhost:4318/v1/traces"
#: the exporter's logger (it logs its failures and retries there, and the encoder its dropped attributes)
_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.exporter.otlp.common.http",
            "opentelemetry.exporter.otlp.proto.common._internal")


class SendFailed(Exception):
    """A send that did not complete (OTLP here, Sentry envelopes in ``export.sentry_out``); ``str()`` is its one
    line: the endpoint, the HTTP status and the receiver's message, or why it was not reached."""


@dataclass(frozen=True, slots=True)
class Sent:
    """What ``send`` delivered: ``spans``, ``requests`` (HTTP requests answered 2xx), ``endpoint`` (the URL)."""

    spans: int
    requests: int
    endpoint: str


def traces_url(endpoint: str) -> str:
    """``endpoint`` (a collector's base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT``) with ``/v1/traces`` added; a URL
    that already ends in it is kept."""
    e = endpoint.rstrip("/")
    return e if e.endswith(TRACES_PATH) else e + TRACES_PATH


def env_endpoint() -> str | None:
    """The collector named by the environment (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as is, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``), or None when neither is set."""
    t = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if t:
        return t
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return traces_url(base) if base else None


def refusal_message(body: bytes, content_type: str) -> str:
    """A collector's error body as one line: the ``message`` of a ``google.rpc.Status`` (protobuf or JSON, as
    OTLP/HTTP answers: https://opentelemetry.io/docs/specs/otlp/#failures-1), else the text's first line (at most
    300 characters)."""
    ct = (content_type or "").lower()
    text = ""
    if "protobuf" in ct:
        try:
            from google.rpc.status_pb2 import Status

            text = Status.FromString(body).message
        except Exception:  # (not a Status: said as text below)
            text = ""
    if not text and body:
        try:
            import orjson

            doc = orjson.loads(body)
            text = str(doc.get("message") or doc.get("detail") or doc.get("error") or "") if isinstance(doc, dict) else ""
        except orjson.JSONDecodeError:
            text = ""
        text = text or body.decode("utf-8", "replace")
    line = " ".join(text.split())
    return line[:300]


class _Quiet(logging.Handler):
    """Takes the exporter's log records while it sends (they would print as warnings and tracebacks): what went
    wrong is said once, in ``SendFailed``'s line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)

    def emit(self, record: logging.LogRecord) -> None:
        pass


def connection_reason(e: BaseException) -> str:
    """Why a connection failed, in a few words: the OS error (``[Errno 111] Connection refused``) inside requests'
    and urllib3's wrappers when there is one, else the exception's text (300 characters)."""
    text = str(e)
    m = re.search(r"\[Errno -?\d+\] [^\"')]+", text)
    if m:
        return m.group(0).strip()
    return " ".join((text or type(e).__name__).split())[:300]


def otlp_exporter(url: str, session=None):
    """OpenTelemetry's ``OTLPSpanExporter`` for ``url`` (the full ``/v1/traces`` URL; ``session``: a
    ``requests.Session`` or None), its headers, timeout, compression and certificates from the ``OTEL_EXPORTER_OTLP_*``
    variables, with one more method: ``export_serialized(bytes) -> bool``, which sends one serialized
    ``ExportTraceServiceRequest`` through the exporter's own client (compression, headers, retries within the
    timeout; see the module's docstring) and says whether the collector took it. Raises ImportError without
    ``opentelemetry-exporter-otlp-proto-http``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    class Exporter(OTLPSpanExporter):
        payload = b""

        def _export(self, serialized_data, *args, **kwargs):  # (1.27 to 1.44: called by export()'s retry loop)
            return super()._export(self.payload, *args, **kwargs)

        def export_serialized(self, data: bytes) -> bool:
            client = getattr(self, "_client", None)
            if client is not None and callable(getattr(client, "export", None)):  # (1.45 and later)
                return bool(client.export(data).success)
            self.payload = data  # export() of no span: its retry loop around _export, which sends the payload
            try:
                return self.export([]) is SpanExportResult.SUCCESS
            except OSError:  # (requests' errors: 1.27's export() lets a second failed connection out)
                return False
            finally:
                self.payload = b""

    return Exporter(endpoint=url, session=session)


def send(parts: Iterable[RunData], top_id: str, service: str | None = None, endpoint: str | None = None,
         batch: int = otlp.BATCH) -> Sent:
    """Send the run (``parts``: ``store.reader.load_parts``) to an OTLP/HTTP collector, ``batch`` spans a request.
    ``endpoint``: a base URL (``/v1/traces`` is added); None: the environment's (``env_endpoint``, else
    ``DEFAULT_URL``). Headers, timeout and compression from the environment.
    Raises ``SendFailed`` (one line) at the first batch not delivered; batches sent before it stay sent."""
    import requests as http

    last: list = []  # what the latest request met: ("http", status, message) or ("connection", exception)

    class Watching(http.Session):  # (the collector's answers and the connection errors, as the exporter meets them)
        def send(self, request, **kwargs):
            try:
                resp = super().send(request, **kwargs)
            except Exception as e:
                last[:] = ["connection", e]
                raise
            if resp.status_code >= 300:
                last[:] = ["http", resp.status_code, refusal_message(resp.content, resp.headers.get("content-type", ""))]
            return resp

    session = Watching()
    url = traces_url(endpoint) if endpoint else (env_endpoint() or DEFAULT_URL)
    quiet = _Quiet()
    loggers = [logging.getLogger(n) for n in _LOGGERS]
    saved = [(lg.propagate, lg.level) for lg in loggers]
    for lg in loggers:
        lg.addHandler(quiet)
        lg.propagate = False
        lg.setLevel(logging.WARNING)
    exporter = otlp_exporter(url, session)
    spans = sent = 0
    try:
        for req in otlp.requests(parts, top_id, service, batch):
            data = req.SerializeToString()
            n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
            del req
            last.clear()
            if not exporter.export_serialized(data):
                if last and last[0] == "http":
                    raise SendFailed(f"OTLP export to {url} refused: HTTP {last[1]}" + (f": {last[2]}" if last[2] else ""))
                why = connection_reason(last[1]) if last else "no answer within the timeout"
                raise SendFailed(f"OTLP export: could not reach {url}: {why}")
            spans += n
            sent += 1
    finally:
        exporter.shutdown()
        for lg, (prop, level) in zip(loggers, saved):
            lg.removeHandler(quiet)
            lg.propagate = prop
            lg.setLevel(level)
    return Sent(spans, sent, url)
