"""``stepscope serve``: the local web UI over the store and the endpoint that takes the Sentry SDK's
envelopes. ``create_app`` builds the ASGI app (Starlette); ``stepscope.cli.serve`` runs it (uvicorn).
Starlette is imported on first use of ``create_app``/``ServerConfig``, not with this package."""

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str):
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
