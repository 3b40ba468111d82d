"""``stepscope serve``: the local web UI over the store and the endpoint that takes the Sentry SDK's
envelopes. ``create_app`` builds the ASGI app (Starlette); ``stepscope.cli.serve`` runs it (uvicorn)."""

from .app import ServerConfig, create_app

__all__ = ["ServerConfig", "create_app"]
