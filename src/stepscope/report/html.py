"""Render the self-contained HTML report (one file, opens offline from file://)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape

from ..model import RunData
from .view import build_view

_env = Environment(loader=PackageLoader("stepscope.report", "templates"), autoescape=select_autoescape(["html", "j2"]))


def _static(name: str) -> str:
    return resources.files("stepscope.report").joinpath("static", name).read_text()


def render_report(data: RunData, **view_kwargs) -> str:
    """The report of one run as an HTML string (data, CSS and JS inlined)."""
    view = build_view(data, **view_kwargs)
    data_json = orjson.dumps(view, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("</", "<\\/")
    from markupsafe import Markup

    return _env.get_template("report.html.j2").render(run_id=data.run.id, data_json=Markup(data_json),
                                                      css=Markup(_static("report.css")), js=Markup(_static("report.js")))


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
