"""``POST /v1/traces``: OTLP/HTTP traces (https://opentelemetry.io/docs/specs/otlp/#otlphttp) from any
OpenTelemetry-instrumented program, or stepscope on another host, into the store as runs (``ingest.otlp_decode``,
``ingest.apply.apply_trace``).

Keys and bounds as for envelopes (``web.ingest``): the project key in ``X-Sentry-Auth`` (``Sentry sentry_key=...``) or
``?sentry_key=`` (an OTLP exporter sets the first with ``OTEL_EXPORTER_OTLP_HEADERS``); the body limit before and
after ``Content-Encoding`` (gzip, deflate, br); answered only once the request is committed to the writer's spool.
Answers as OTLP/HTTP specifies, in the request's content type: 200 with an ``ExportTraceServiceResponse``
(``partial_success`` names the spans rejected), 400 with a ``google.rpc.Status`` giving the reason (a body that does
not decode), 401 (no or an unknown key), 413 (over the limit), 415 (a content type other than
``application/x-protobuf`` and ``application/json``: a text line), 503 (the store could not be written: the exporter
retries).
"""

from __future__ import annotations

import logging

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ..ingest import otlp_decode as otlp
from ..ingest.decode import BadEncoding, BodyTooLarge, decode_body
from ..ingest.sentry import Batch
from .ingest import INLINE_BYTES, Counters, IngestEndpoint, Refused, key_from_request
from .net import local_origin

log = logging.getLogger("stepscope.serve")


class OtlpEndpoint(IngestEndpoint):
    """``POST /v1/traces`` over the same ``app_state`` as the envelope endpoints (config, writer, keys, counters)."""

    async def handle(self, request: Request) -> Response:
        """Read, authenticate, decode, store through the writer; see the module for the answers."""
        ctype = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if ctype not in (otlp.PROTOBUF, otlp.JSON):
            return PlainTextResponse(f"Content-Type must be {otlp.PROTOBUF} or {otlp.JSON}, not {ctype or 'none'!r}",
                                     status_code=415)
        c: Counters = self.state.counters
        try:
            body = await self.read_body(request)
            if len(body) <= INLINE_BYTES:
                recs, rejected, reason, project = self.prepare(request, body, ctype)
            else:
                recs, rejected, reason, project = await run_in_threadpool(self.prepare, request, body, ctype)
        except Refused as r:
            c.refused(r.status)
            return Response(otlp.status(r.status, r.detail, ctype), status_code=r.status, media_type=ctype)
        if recs:
            batch = Batch([], [], [], {"otlp_span": sum(len(r.spans) for r in recs)}, {}, None, recs)
            try:
                await self.state.writer.store(batch, project)
            except Exception as e:  # the store, not the request: the exporter retries a 503
                c.unavailable += 1
                log.warning("could not store an OTLP request: %s", e)
                return Response(otlp.status(503, f"the store could not be written: {e}", ctype), status_code=503,
                                media_type=ctype)
        c.accepted += 1
        enc = (request.headers.get("content-encoding") or "identity").strip().lower()
        c.encodings[enc] = c.encodings.get(enc, 0) + 1
        return Response(otlp.response(rejected, reason, ctype), media_type=ctype)

    def prepare(self, request: Request, body: bytes, ctype: str) -> tuple[list, int, int, str | None]:
        """``(trace records, rejected spans, why the first was, project id)`` of a request. Raises Refused."""
        cfg = self.state.config
        key = key_from_request(request)
        project = self.state.project_of(key) if key is not None else None
        if cfg.open_mode and not local_origin(request.headers.get("origin")):
            if project is None:  # (a web page the user visits could otherwise write here: see web.ingest)
                raise Refused(401, "open mode takes cross-site requests only with a sentry_key of the project "
                                   "(see `stepscope keys list`)")
        elif not cfg.open_mode:
            if key is None:
                raise Refused(401, "missing sentry_key (an X-Sentry-Auth: Sentry sentry_key=KEY header, e.g. through "
                                   "OTEL_EXPORTER_OTLP_HEADERS, or ?sentry_key=); `stepscope keys add` makes one, "
                                   "`stepscope serve --open` accepts any")
            self.check_key(key, None)
        try:
            data = decode_body(body, request.headers.get("content-encoding"), cfg.max_decoded_bytes)
            recs, rejected, reason = otlp.records(otlp.parse_request(data, ctype))
        except BodyTooLarge as e:
            raise Refused(413, str(e)) from None
        except (BadEncoding, otlp.BadOtlp) as e:
            raise Refused(400, str(e)) from None
        except MemoryError:
            raise Refused(413, "request too large to decode") from None
        return recs, rejected, reason, project
