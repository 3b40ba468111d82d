"""The UI's Jinja2 templates and filters (no Starlette: ``stepscope bench show --html`` renders the same
benchmark page as a self-contained file)."""

from __future__ import annotations

from datetime import datetime
from importlib import resources

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

env = Environment(loader=PackageLoader("stepscope.web", "templates"), autoescape=select_autoescape(["html", "j2"]))


def fmt_ns(ns: int | None) -> str:
    """A duration in ns as "1.23 s", "45.6 ms" or "789 us"; "-" for None."""
    if ns is None:
        return "-"
    s = ns / 1e9
    return f"{s:.2f} s" if s >= 1 else f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} us"


def fmt_wall(ns: int) -> str:
    """Wall time in ns since the epoch as local "YYYY-mm-dd HH:MM:SS"; "-" for 0."""
    return datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S") if ns else "-"


env.filters["dur"] = fmt_ns
env.filters["wall"] = fmt_wall


def ui_css() -> str:
    return resources.files("stepscope.web").joinpath("ui.css").read_text()


def bench_page(b: dict, v, plot_src: str | None, standalone: bool = False) -> str:
    """The benchmark page: verdict table, warnings, per-run plot. ``b``: ``store.bench.load``'s dict;
    ``v``: its ``Verdict``; ``plot_src``: the plot's URL (or a ``data:`` URI), None without timed runs;
    ``standalone``: CSS inlined and no site navigation (a file that opens offline)."""
    from ..bench.results import mem_text

    return env.get_template("bench.html.j2").render(title=f"benchmark {b['id']}", b=b, v=v, plot_src=plot_src, mem_text=mem_text,
                                                    inline_css=Markup(ui_css()) if standalone else None)
