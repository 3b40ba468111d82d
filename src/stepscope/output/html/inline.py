"""What a notebook shows of a run or a comparison (``notebook.handle``): the terminal's first screen as HTML, with the
self-contained report (waterfall, flame graphs, memory lane) or the comparison page in an ``<iframe srcdoc>`` below.

The frame holds the same page ``stepscope report`` writes: its data, CSS and JS inline, nothing fetched, so the
output works offline and where the notebook is opened again (JupyterLab, VS Code, Colab: pyinstrument's
``%%pyinstrument`` shows its report the same way). In a terminal IPython the same text is printed, without the page.
"""

from __future__ import annotations

import html
import io
from typing import Callable

#: Width of the first screen in characters (the terminal's tables are laid out for it).
WIDTH = 110
#: Width of a comparison (its tables have more columns).
DIFF_WIDTH = 150
#: Height of the inline report's frame (px); the page scrolls inside it.
FRAME_HEIGHT = 720

_PRE = ('<pre style="font-family: Menlo, \'DejaVu Sans Mono\', Consolas, monospace; font-size: 12px; '
        'line-height: 1.2; white-space: pre; overflow-x: auto; margin: 0 0 6px 0">{code}</pre>')


def console_text(draw: Callable, width: int = WIDTH) -> str:
    """What ``draw(console)`` prints, as plain text (no colour codes), ``width`` characters wide."""
    from rich.console import Console

    buf = io.StringIO()
    draw(Console(file=buf, width=width, color_system=None, force_terminal=False, force_jupyter=False, soft_wrap=False))
    return buf.getvalue()


def console_html(draw: Callable, width: int = WIDTH) -> str:
    """What ``draw(console)`` prints, as an HTML ``<pre>`` with the terminal's colours as inline styles."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, record=True, force_terminal=True, force_jupyter=False,
                      color_system="truecolor")
    draw(console)
    return console.export_html(inline_styles=True, code_format=_PRE)


def frame(page: str, title: str, height: int = FRAME_HEIGHT) -> str:
    """``page`` (a whole HTML document) in an ``<iframe srcdoc>``: its scripts run in the frame's own document."""
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" title="{html.escape(title)}" '
            f'style="width: 100%; height: {height}px; border: 1px solid #d0d7de; border-radius: 4px; background: #fff" '
            f'loading="eager"></iframe>')


def _block(body: str, run_line: str) -> str:
    return (f'<div class="stepscope-output" style="max-width: 100%">{body}'
            f'<div style="font-size: 11px; color: #57606a; margin-top: 4px">{html.escape(run_line)}</div></div>')


def run_html(run, report: bool = True) -> str:
    """A recorded run (``notebook.handle.ProfiledRun``) as notebook HTML: its first screen, then (``report``) the
    interactive report inline."""
    from ..terminal.summary import print_summary
    from .html import render_report

    data = run.data
    body = console_html(lambda c: print_summary(run.summary(), c))
    if report:
        from ...device.view import device_view

        page = render_report(data, device=device_view(run._store(), run.run_id, data))
        body += (f'<details open><summary style="cursor: pointer; font-size: 12px">interactive report: waterfall, '
                 f'flame graphs, memory lane</summary>{frame(page, f"stepscope report {run.run_id}")}</details>')
    return _block(body, f"run {run.run_id} in {run.store} · stepscope report {run.run_id} writes it as a file")


def shown_html(shown) -> str:
    """A command's result (``notebook.handle.Shown``) as notebook HTML: its terminal output, then its page."""
    body = console_html(shown._draw, DIFF_WIDTH if shown.page else WIDTH)
    if shown.page:
        body += (f'<details open><summary style="cursor: pointer; font-size: 12px">comparison page</summary>'
                 f'{frame(shown.page, shown.title)}</details>')
    return _block(body, shown.title)
