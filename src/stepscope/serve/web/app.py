"""The ASGI app of ``stepscope serve`` (Starlette): ingest routes, the web UI pages and a small JSON API.

Pages reuse the HTML report's template, view model and script (``stepscope.output.html``) with the page
mode "run", "explain" or "device", so the served views and the report file are one implementation.
Readers use one SQLite connection per thread (WAL: they never block the writer); all writes go
through the one ``Writer``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ...device.kineto import TraceError
from ...device.runview import AlignError
from ..ingest.writer import Writer
from ...store import keys as keystore
from ...store.db import Store, StoreError
from . import pages
from .ingest import Counters, IngestEndpoint
from .otlp_routes import OtlpEndpoint
from .net import LOOPBACK_NAMES, is_loopback

log = logging.getLogger("stepscope.serve")


@dataclass(frozen=True)
class ServerConfig:
    """``store``: the store folder. ``open_mode``: accept envelopes without a key (development only).
    ``max_body_bytes``: request body limit (bytes, as sent); ``max_decoded_bytes``: after decompression.
    ``host``: the address served on; on a loopback address only loopback ``Host`` headers are answered
    (no DNS rebinding)."""

    store: Path
    open_mode: bool = False
    max_body_bytes: int = 20 * 1024 * 1024
    max_decoded_bytes: int = 100 * 1024 * 1024
    host: str = "127.0.0.1"


#: How long a key's lookup is trusted (s).
KEY_CACHE_S = 1.0


class AppState:
    """What the routes share: config, the writer, per-thread read connections, counters."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.counters = Counters()
        self.writer: Writer | None = None
        self._local = threading.local()
        self._keys: dict[str, tuple[str | None, float]] = {}  # public key -> (project id or None, when looked up)

    def store(self) -> Store:
        """This thread's read connection to the store."""
        st = getattr(self._local, "store", None)
        if st is None:
            st = self._local.store = Store(self.config.store)
        return st

    def project_of(self, key: str) -> str | None:
        """The project id of a public key, or None for an unknown key. Answers are kept ``KEY_CACHE_S`` seconds (a
        read of the store per envelope cost ~5% of the ingest rate): a key added or removed with ``stepscope keys``
        takes effect within that time."""
        now = time.monotonic()
        hit = self._keys.get(key)
        if hit is not None and now - hit[1] < KEY_CACHE_S:
            return hit[0]
        project = keystore.project_of(self.store(), key)
        if len(self._keys) > 10_000:  # bounded: a flood of made-up keys cannot grow it
            self._keys.clear()
        self._keys[key] = (project, now)
        return project


class SecurityHeaders:
    """No CORS grant (no ``Access-Control-Allow-Origin``), no sniffing, no framing, no referrers."""

    HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer")]

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [h for h in message["headers"] if h[0].lower() != b"access-control-allow-origin"]
                message["headers"].extend(self.HEADERS)
            await send(message)

        await self.app(scope, receive, send_with)


def create_app(config: ServerConfig) -> Starlette:
    """The app over ``config.store`` (created when missing). Raises StoreError if it cannot be opened."""
    state = AppState(config)
    st = Store(config.store)  # fail early, with the store's own message
    keystore.ensure_schema(st)
    from ...store.listing import ensure_index

    ensure_index(st)
    st.close()
    ingest = IngestEndpoint(state)
    traces = OtlpEndpoint(state)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        state.writer = Writer(config.store)
        try:
            yield
        finally:
            await state.writer.aclose()

    async def not_found(request: Request, exc) -> Response:
        detail = getattr(exc, "detail", "not found")
        if request.url.path.startswith("/api/"):
            return Response(orjson.dumps({"detail": detail}), status_code=exc.status_code, media_type="application/json")
        return HTMLResponse(pages.error_page(detail, exc.status_code), status_code=exc.status_code)

    async def store_error(request: Request, exc: StoreError) -> Response:
        if request.url.path.startswith("/api/"):
            return Response(orjson.dumps({"detail": str(exc)}), status_code=404, media_type="application/json")
        return HTMLResponse(pages.error_page(str(exc), 404), status_code=404)

    async def unreadable(request: Request, exc: ValueError) -> Response:
        # a run's device trace that cannot be read (damaged, nested too deeply, no clock markers): its one line,
        # as the CLI prints it, not a traceback
        log.warning("%s: %s", request.url.path, exc)
        if request.url.path.startswith("/api/"):
            return Response(orjson.dumps({"detail": str(exc)}), status_code=500, media_type="application/json")
        return HTMLResponse(pages.error_page(str(exc), 500), status_code=500)

    async def stats(request: Request) -> Response:
        # the writer made the ingest tables before the first request (lifespan)
        # items: (received, stored) per item type; spool: acknowledged envelopes not yet runs (the writer's
        # backlog), and those that failed to become runs (kept, tried again when the writer starts next)
        items, waiting, failed = state.store().ingest_stats()
        return Response(orjson.dumps({"endpoint": dataclasses.asdict(state.counters),
                                      "items": {t: {"received": r, "stored": s} for t, (r, s) in items.items()},
                                      "spool": {"waiting": waiting, "failed": failed}}),
                        media_type="application/json")

    routes = [
        Route("/api/{project_id:int}/envelope/", ingest.handle, methods=["POST"]),
        Route("/api/{project_id:int}/envelope", ingest.handle, methods=["POST"]),
        Route("/api/envelope/", ingest.handle, methods=["POST"]),
        Route("/stream", ingest.handle, methods=["POST"]),
        Route("/v1/traces", traces.handle, methods=["POST"]),  # OTLP/HTTP (web/otlp.py)
        Route("/api/stats", stats),
        *pages.routes(state),
    ]
    middleware = [Middleware(SecurityHeaders)]
    if is_loopback(config.host):
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=[*LOOPBACK_NAMES, config.host]))
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                     exception_handlers={404: not_found, 405: not_found, 400: not_found, StoreError: store_error,
                                         TraceError: unreadable, AlignError: unreadable})

