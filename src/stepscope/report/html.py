"""Render the self-contained HTML report (one file, opens offline from file://)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape

from ..model import RunData
from .view import build_view

_env = Environment(loader=PackageLoader("stepscope.report", "templates"), autoescape=select_autoescape(["html", "j2"]))


STATIC_FILES = ("report.css", "report.js")


def static_text(name: str) -> str:
    """One of the report's static files (``STATIC_FILES``) as text."""
    return resources.files("stepscope.report").joinpath("static", name).read_text()


def render_report(data: RunData, *, page: str = "report", nav: list[tuple[str, str, bool]] | None = None,
                  static_base: str | None = None, heading: str | None = None, **view_kwargs) -> str:
    """The report of one run as an HTML string.

    By default self-contained (data, CSS and JS inlined; opens offline). The web UI renders the same
    page with ``page`` = "run", "explain" or "device" (which sections show), ``nav`` links
    ``(label, href, is_current)`` and ``static_base`` (CSS/JS served, not inlined): one implementation
    for both. ``view_kwargs`` go to ``build_view``.
    """
    view = build_view(data, **view_kwargs)
    data_json = orjson.dumps(view, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("</", "<\\/")
    from markupsafe import Markup

    inline = static_base is None
    return _env.get_template("report.html.j2").render(
        run_id=data.run.id, data_json=Markup(data_json), page=page, nav=nav, static_base=static_base,
        heading=heading, title=f"{heading} · {data.run.id}" if heading else data.run.id,
        css=Markup(static_text("report.css")) if inline else "", js=Markup(static_text("report.js")) if inline else "")


def device_for(store, data: RunData):
    """The run's device view and ``(trace, clock map)`` for the report, or None without a device trace."""
    p = store.path / "runs" / data.run.id / "device_trace.json.gz"
    if not p.exists():
        return None
    from ..device.kineto import load
    from ..device.runview import clock_map, run_device

    trace = load(p)
    return run_device(data, trace), (trace, clock_map(trace))


def write_report(data: RunData, path: str | Path, **view_kwargs) -> Path:
    """Write the report to ``path``; returns the path. Raises OSError if it cannot be written.
    ``view_kwargs`` go to ``build_view`` (e.g. ``device=device_for(store, data)``)."""
    p = Path(path)
    p.write_text(render_report(data, **view_kwargs), encoding="utf-8")
    return p
