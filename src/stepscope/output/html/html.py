"""Render the HTML report: a self-contained file (opens offline from file://), or a page served by the web UI in
one of its modes ("run", "explain", "device") with the same template and script.

The page: first the verdict (what is slow, its shape, the path of the extra time; the rule once) and the step
table; then the waterfall with labelled rows and the span tree (search), the flame graph of the traced work
(start-up a collapsed block; colours by kind with a legend; search; sandwich; node weights from one function,
``sampleWeight``), the explanation's details. The explain page leads with the explanation (no waterfall); the
device page, and the report's device part, show what ``stepscope device`` shows, from the same ``DeviceView``
(``static/device.js``); a job of several processes adds the processes table and the steps x ranks heat map
(``static/ranks.js``).

The script is the ``SCRIPT_PARTS`` of ``static/`` joined in order inside one function (``report_script``: one
scope, no build tool), inlined or served at ``/static/report.js``; it reads view model version 1 only (another:
one line says so). Stored text never changes the page's structure: data enters the page only as JSON from
``script_json`` (``<``, ``>``, ``&``, U+2028, U+2029 as ``\\u`` escapes, so ``</script>`` in a span, frame or thread
name stays text); templates autoescape; the script writes text with ``textContent`` or ``esc()``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape

from ...core.model import RunData
from .view import build_view

_env = Environment(loader=PackageLoader("stepscope.output.html", "templates"), autoescape=select_autoescape(["html", "j2"]))


#: what the report page loads: inlined in a self-contained file, served at ``/static/NAME`` by the web UI
STATIC_FILES = ("report.css", "report.js")

#: The parts of ``report.js``, in the order ``report_script`` joins them. They share one function scope: a part
#: may use at its top level what the parts before it declare (functions from any part, as they are hoisted).
SCRIPT_PARTS = ("core.js", "verdict.js", "waterfall.js", "lod.js", "spantree.js", "flame.js", "tables.js", "device.js",
                "ranks.js", "main.js")

_SCRIPT_HEAD = """// stepscope report: what is slow first (verdict, steps), then the waterfall with its span tree and the
// flame graph of any window (traced work by default, start-up one click away), from the embedded view model
// (docs/report-view-model.md). Joined by stepscope.output.html.html from output/html/static/{parts}.
(function () {{
  "use strict";
"""


def _static_file(name: str) -> str:
    return resources.files("stepscope.output.html").joinpath("static", name).read_text(encoding="utf-8")


def report_script() -> str:
    """The report's script: the ``SCRIPT_PARTS`` joined in order inside one function (no build tool). Raises
    ValueError if the text could end the ``<script>`` element it is inlined in."""
    text = _SCRIPT_HEAD.format(parts=", ".join(SCRIPT_PARTS)) + \
        "".join(f"\n  // ==== {name}\n{_static_file(name)}" for name in SCRIPT_PARTS) + "})();\n"
    low = text.lower()
    if "</script" in low or "<!--" in low:
        raise ValueError("the report script holds '</script' or '<!--': it cannot be inlined")
    return text


def static_text(name: str) -> str:
    """One of the report's static files (``STATIC_FILES``) as text; ``report.js`` is ``report_script()``."""
    return report_script() if name == "report.js" else _static_file(name)


# characters that could end a <script> element early or change how the HTML parser reads its text
# ("<!--<script>" makes it swallow the next "</script>"), or end a JS string line (U+2028/U+2029)
_SCRIPT_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def script_json(doc) -> str:
    """``doc`` as JSON text that can be embedded in any ``<script>`` element whatever its strings hold:
    ``<``, ``>``, ``&``, U+2028 and U+2029 are written as ``\\u`` escapes, which leaves the same JSON
    (they occur only inside strings). Numpy values are serialised. Raises TypeError for what JSON cannot
    hold."""
    text = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    for ch, esc in _SCRIPT_ESCAPES:
        if ch in text:
            text = text.replace(ch, esc)
    return text


def view_json(data: RunData, **view_kwargs) -> str:
    """The view model as JSON text, safe to embed in a ``<script>`` element (``script_json``)."""
    return script_json(build_view(data, **view_kwargs))


def render_page(run_id: str, data_json: str, *, page: str = "report", nav: list[tuple[str, str, bool]] | None = None,
                static_base: str | None = None, heading: str | None = None) -> str:
    """The report page around an embedded view (``view_json``); see ``render_report`` for the arguments."""
    from markupsafe import Markup

    inline = static_base is None
    return _env.get_template("report.html.j2").render(
        run_id=run_id, data_json=Markup(data_json), page=page, nav=nav, static_base=static_base,
        heading=heading, title=f"{heading} · {run_id}" if heading else run_id,
        css=Markup(static_text("report.css")) if inline else "", js=Markup(static_text("report.js")) if inline else "")


def render_report(data: RunData, *, page: str = "report", nav: list[tuple[str, str, bool]] | None = None,
                  static_base: str | None = None, heading: str | None = None, **view_kwargs) -> str:
    """The report of one run as an HTML string.

    By default self-contained (data, CSS and JS inlined; opens offline). The web UI renders the same
    page with ``page`` = "run", "explain" or "device" (which sections show), ``nav`` links
    ``(label, href, is_current)`` and ``static_base`` (CSS/JS served, not inlined): one implementation
    for both. ``view_kwargs`` go to ``build_view``.
    """
    return render_page(data.run.id, view_json(data, **view_kwargs), page=page, nav=nav, static_base=static_base,
                       heading=heading)


def write_report(data: RunData, path: str | Path, **view_kwargs) -> Path:
    """Write the report to ``path``; returns the path. Raises OSError if it cannot be written.
    ``view_kwargs`` go to ``build_view`` (e.g. ``device=device_view(store, run_id, data)``: ``device.view``)."""
    p = Path(path)
    p.write_text(render_report(data, **view_kwargs), encoding="utf-8")
    return p
