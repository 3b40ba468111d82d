"""``stepscope serve``: the local web UI over the store and the ingest endpoints. ``create_app`` builds the ASGI app
(Starlette, ``app``); ``stepscope.cli.serve`` runs it (uvicorn, with ``headlimits``' bounded request heads).
``pages`` (the UI and its JSON API), ``compare`` (the compare page), ``templating`` (the benchmark page),
``ingest`` (the Sentry envelope endpoints), ``otlp_routes`` (``POST /v1/traces``), ``net`` (what is loopback).
Starlette is imported on first use of ``create_app``/``ServerConfig``, not with this package.
"""

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str):
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
