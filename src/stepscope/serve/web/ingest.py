"""The ingest endpoints: ``POST /api/<project id>/envelope/`` (a DSN's target) and ``POST /stream``
(Sentry Spotlight's sidecar). Status codes as Sentry's Relay gives them: 200 ``{"id": event id}``,
400 ``{"detail": reason}`` for a malformed envelope, 401 for a missing or unknown key, 413 for a body
over the limit (before or after decompression), 503 when the store cannot be written."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..ingest import sentry
from ..ingest.decode import BadEncoding, BodyTooLarge, decode_body
from ..ingest.envelope import EnvelopeError, parse
from ...core.jsondepth import TOO_DEEP
from .net import local_origin

log = logging.getLogger("stepscope.serve")
#: bodies up to this many bytes (as sent) are decoded and validated on the event loop: for the SDK's usual
#: envelope (a transaction of ~50 spans and its profile, ~6 KB gzip, ~0.5 ms of work) a hop to the thread
#: pool and back costs more than the work; larger ones go to the pool so that the loop keeps answering
INLINE_BYTES = 32_768
_AUTH_KEY = re.compile(r"sentry_key\s*=\s*([^,\s]+)")
_DSN_KEY = re.compile(r"^[a-z]+://([^:@/]+)(?::[^@/]*)?@[^/]+/(?:.*/)?(\d+)/?$")


class Refused(Exception):
    """Answer ``status`` with ``detail``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class Counters:
    """What the endpoint has answered since the server started (for ``/api/stats``)."""

    accepted: int = 0
    bad_request: int = 0
    unauthorized: int = 0
    too_large: int = 0
    unavailable: int = 0
    encodings: dict[str, int] = field(default_factory=dict)  # accepted envelopes by Content-Encoding

    def refused(self, status: int) -> None:
        """Count a refusal with HTTP ``status`` (400, 401 or 413; others are not counted here)."""
        if status == 400:
            self.bad_request += 1
        elif status == 401:
            self.unauthorized += 1
        elif status == 413:
            self.too_large += 1


def key_from_request(request: Request) -> str | None:
    """``sentry_key`` from ``X-Sentry-Auth`` (``Sentry sentry_key=..., sentry_version=7``), then from the
    query string."""
    auth = request.headers.get("x-sentry-auth") or ""
    m = _AUTH_KEY.search(auth)
    if m:
        return m.group(1)
    return request.query_params.get("sentry_key") or None


def key_from_dsn(dsn) -> tuple[str, str] | None:
    """(key, project id) from an envelope header's ``dsn``, or None."""
    if not isinstance(dsn, str):
        return None
    m = _DSN_KEY.match(dsn.strip())
    return (m.group(1), m.group(2)) if m else None


class IngestEndpoint:
    """Both routes; ``app_state`` gives ``config``, ``writer``, ``project_of(key)`` and ``counters``."""

    def __init__(self, state) -> None:
        self.state = state

    async def handle(self, request: Request) -> Response:
        """Read, authenticate, decode, validate, then store through the writer; answers only once the
        envelope is committed to the store (200; the writer process commits it to its spool, ``ingest.writer``)
        or refused (400/401/413/503)."""
        c: Counters = self.state.counters
        try:
            body = await self.read_body(request)
            if len(body) <= INLINE_BYTES:  # (a thread hop costs more than the work; see INLINE_BYTES)
                batch, project = self._prepare(request, body)
            else:
                batch, project = await run_in_threadpool(self._prepare, request, body)
        except Refused as r:
            c.refused(r.status)
            return JSONResponse({"detail": r.detail}, status_code=r.status)
        try:
            result = await self.state.writer.store(batch, project)
        except Exception as e:  # the store, not the envelope: the client may retry
            c.unavailable += 1
            log.warning("could not store an envelope: %s", e)
            return JSONResponse({"detail": f"the store could not be written: {e}"}, status_code=503)
        c.accepted += 1
        enc = (request.headers.get("content-encoding") or "identity").strip().lower()
        c.encodings[enc] = c.encodings.get(enc, 0) + 1
        # Relay's answer; the thread writer also says what it stored (the process writer answers once the envelope
        # is committed to the spool, before it becomes runs)
        extra = {k: result[k] for k in ("runs", "samples") if k in result}
        return Response(orjson.dumps({"id": batch.event_id or (batch.transactions[0].event_id if batch.transactions
                                                                 else None), **extra}), media_type="application/json")

    async def read_body(self, request: Request) -> bytes:
        """The request's body, as sent. Raises Refused: 413 over ``max_body_bytes`` (by Content-Length or as it
        arrives), 400 for a Content-Length that is not a number."""
        limit = self.state.config.max_body_bytes
        cl = request.headers.get("content-length")
        if cl is not None:
            if not cl.isdigit():
                raise Refused(400, "Content-Length is not a number")
            if int(cl) > limit:
                raise Refused(413, f"body of {cl} bytes is over the limit of {limit} bytes")
        buf = bytearray()
        async for chunk in request.stream():
            buf += chunk
            if len(buf) > limit:
                raise Refused(413, f"body is over the limit of {limit} bytes")
        return bytes(buf)

    def _prepare(self, request: Request, body: bytes) -> tuple[sentry.Batch, str | None]:
        cfg = self.state.config
        project = request.path_params.get("project_id")
        project = None if project is None else str(project)
        key = key_from_request(request)
        if cfg.open_mode and not local_origin(request.headers.get("origin")):
            # a web page the user visits could otherwise write here (browsers send Origin on cross-site POSTs):
            # it needs a real key of the project, as without --open; any made-up key would do otherwise
            owner = self.state.project_of(key) if key is not None else None
            if owner is None or (project is not None and owner != project):
                raise Refused(401, "open mode takes cross-site requests only with a sentry_key of the project "
                                   "(see `stepscope keys list`)")
            project = project or owner
        if key is not None and not cfg.open_mode:
            self.check_key(key, project)
            project = project or self.state.project_of(key)
        try:
            data = decode_body(body, request.headers.get("content-encoding"), cfg.max_decoded_bytes)
            env = parse(data)
        except BodyTooLarge as e:
            raise Refused(413, str(e)) from None
        except (BadEncoding, EnvelopeError) as e:
            raise Refused(400, str(e)) from None
        if key is None and not cfg.open_mode:
            k = key_from_dsn(env.headers.get("dsn"))
            if k is None:
                raise Refused(401, "missing sentry_key (X-Sentry-Auth header, ?sentry_key= or the envelope's dsn); "
                                   "`stepscope keys add` makes one, `stepscope serve --open` accepts any")
            self.check_key(k[0], project or k[1])
            project = project or k[1]
        try:
            return sentry.batch(env), project
        except EnvelopeError as e:
            raise Refused(400, str(e)) from None
        except RecursionError:  # (sentry.batch names the item; this is for anything it missed)
            raise Refused(400, f"envelope {TOO_DEEP}") from None
        except MemoryError:
            raise Refused(413, "envelope too large to validate") from None
        except Exception as e:  # a validation we missed: still the client's envelope, never a 500
            log.warning("malformed envelope not caught by validation: %r", e)
            raise Refused(400, f"malformed envelope ({type(e).__name__}: {e})") from None

    def check_key(self, key: str, project: str | None) -> None:
        """Raises Refused (401) unless ``key`` is a key of ``project`` (of any project when None)."""
        owner = self.state.project_of(key)
        if owner is None:
            raise Refused(401, "unknown sentry_key (see `stepscope keys list`)")
        if project is not None and owner != project:
            raise Refused(401, f"sentry_key is not a key of project {project}")
