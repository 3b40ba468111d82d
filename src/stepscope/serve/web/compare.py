"""``GET /compare?a=RUN&b=RUN&span=NAME``: two runs picked from the store, compared (``stepscope diff``)."""

from __future__ import annotations

from starlette.responses import HTMLResponse

from ...store.db import StoreError

PICKER_RUNS = 300


def run_choices(store, limit: int = PICKER_RUNS) -> list[dict]:
    """The newest runs for the pickers: ``{"id", "label"}`` (id, start, source, command or transaction); the
    envelopes ``stepscope serve`` has acknowledged are waited for first, as ``Store.list_runs`` does."""
    from ...output.html.templating import fmt_wall

    out = []
    for rid, command, wall, source in store.recent_runs_for_picker(limit):
        cmd = " ".join(command)
        if len(cmd) > 90:
            cmd = "…" + cmd[-89:]
        out.append({"id": rid, "label": f"{rid} · {fmt_wall(wall or 0)} · {source} · {cmd}"})
    return out


def compare_response(store, params, diff_error: type) -> HTMLResponse:
    """The compare page for the query ``params`` (``a``, ``b``: run ids or prefixes, default as ``stepscope
    diff`` picks them; ``span``). An unknown run answers 404, runs with nothing to compare 400, each with
    the pickers and the reason on the page."""
    from ...analysis.diff import diff_runs
    from ...analysis.runpick import device_trace_path, pick_runs
    from ...output.html.compare import compare_page
    from ...store.reader import load_run

    a_ref, b_ref = params.get("a") or None, params.get("b") or None
    span = (params.get("span") or "").strip()[:300]
    runs = run_choices(store)
    try:
        a_id, b_id = pick_runs(store, a_ref, b_ref)
    except StoreError as e:
        return HTMLResponse(compare_page(None, runs, (a_ref or "", b_ref or ""), span, error=str(e)), status_code=404)
    except diff_error as e:
        return HTMLResponse(compare_page(None, runs, (a_ref or "", b_ref or (runs[0]["id"] if runs else "")), span,
                                         error=str(e)), status_code=400)
    try:
        d = diff_runs(load_run(store, a_id), load_run(store, b_id), span or None, device_trace_path(store, a_id),
                      device_trace_path(store, b_id))
    except diff_error as e:
        return HTMLResponse(compare_page(None, runs, (a_id, b_id), span, error=str(e)), status_code=400)
    return HTMLResponse(compare_page(d, runs, (a_id, b_id), span))
