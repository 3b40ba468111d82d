"""The Jinja2 environment of the UI's pages (``web/templates``, ``web/ui.css``) and its filters, shared by the web
UI (``web/``) and the pages also written as self-contained files: the compare page (``output/html/compare.py``) and the
benchmark page (``web/templating.py``). No Starlette: imported without the web app."""

from __future__ import annotations

from datetime import datetime
from importlib import resources

from jinja2 import Environment, PackageLoader, select_autoescape

from ...core.units import fmt_ns_page

env = Environment(loader=PackageLoader("stepscope.serve.web", "templates"), autoescape=select_autoescape(["html", "j2"]))


def fmt_wall(ns: int) -> str:
    """Wall time in ns since the epoch as local "YYYY-mm-dd HH:MM:SS"; "-" for 0."""
    return datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S") if ns else "-"


env.filters["dur"] = fmt_ns_page
env.filters["wall"] = fmt_wall


def ui_css() -> str:
    """The UI's stylesheet (``web/ui.css``) as text, for a page that inlines it."""
    return resources.files("stepscope.serve.web").joinpath("ui.css").read_text()
