"""The web UI's pages and JSON API (read-only). Every URL is shareable: list filters and sort are query
parameters, a selected span or step is the run page's fragment (``/runs/ID#span=12``)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from urllib.parse import urlencode

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ...device.view import device_view, files_state, run_trace
from ...output.html.html import STATIC_FILES, render_page, static_text, view_json
from ...output.html.templating import env, ui_css
from ...store.db import StoreError
from ...store.reader import load_run
from .templating import bench_page

_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
_UI_CSS = "ui.css"
PAGE_SIZE = 100


def error_page(detail: str, status: int) -> str:
    """An HTML page for an error answer (``detail`` is escaped)."""
    return env.get_template("error.html.j2").render(detail=detail, status=status, title=f"{status}")


def run_nav(run_id: str, current: str) -> list[tuple[str, str, bool]]:
    """The links above a run's pages: ``(label, href, is_current)``."""
    base = f"/runs/{run_id}"
    return [("← transactions", "/", False), ("run", base, current == "run"), ("explain", f"{base}/explain", current == "explain"),
            ("device", f"{base}/device", current == "device"), ("compare", f"/compare?b={run_id}", False), ("report file", f"{base}/report.html", False),
            ("speedscope", f"{base}/export/speedscope", False), ("Chrome trace", f"{base}/export/chrome", False),
            ("benchmarks", "/bench", False)]


def routes(state) -> list[Route]:
    """The UI's routes over ``state`` (see ``stepscope.serve.web.app.AppState``)."""

    def list_args(request: Request) -> dict:
        qp = request.query_params
        sort = qp.get("sort", "start")
        if sort not in ("start", "duration", "name"):
            raise HTTPException(400, f"sort must be start, duration or name, not {sort!r}")
        order = qp.get("order", "asc" if sort == "name" else "desc")
        page = qp.get("page", "1")
        if order not in ("asc", "desc") or not page.isdigit() or int(page) < 1:
            raise HTTPException(400, "order must be asc or desc; page a number from 1")
        return {"q": qp.get("q", "")[:200], "sort": sort, "order": order, "page": int(page)}

    def query(args: dict):
        from ...store.listing import transactions

        return transactions(state.store(), args["q"], args["sort"], args["order"] == "desc", PAGE_SIZE,
                            (args["page"] - 1) * PAGE_SIZE)

    def index(request: Request) -> HTMLResponse:
        args = list_args(request)
        rows, total = query(args)

        def url(**kw) -> str:
            a = {**args, **kw}
            return "/?" + urlencode({k: v for k, v in a.items() if v not in ("", None)})

        def sort_url(key: str) -> str:
            flip = "asc" if args["sort"] == key and args["order"] == "desc" else "desc"
            return url(sort=key, order=flip if args["sort"] == key else ("asc" if key == "name" else "desc"), page=1)

        pages_n = max(1, -(-total // PAGE_SIZE))
        return HTMLResponse(env.get_template("transactions.html.j2").render(
            title="transactions", rows=rows, total=total, args=args, sort_url=sort_url, store=str(state.config.store),
            prev_url=url(page=args["page"] - 1) if args["page"] > 1 else None,
            next_url=url(page=args["page"] + 1) if args["page"] < pages_n else None, pages=pages_n,
            counters=state.counters))

    def api_transactions(request: Request) -> Response:
        args = list_args(request)
        rows, total = query(args)
        return Response(orjson.dumps({"total": total, "page": args["page"], "transactions": [dataclasses.asdict(r) for r in rows]}),
                        media_type="application/json")

    def _load(run_id: str):
        st = state.store()
        try:
            data = load_run(st, st.resolve_id(run_id))
        except StoreError as e:
            raise HTTPException(404, str(e)) from None
        return st, data

    views: OrderedDict = OrderedDict()  # (run id, spans, samples, device files' mtimes) -> view JSON
    views_lock = threading.Lock()

    def cached_view(ref: str) -> tuple[str, str]:
        """(run id, view JSON); the JSON is rebuilt only when the run has changed (new spans, samples
        or device files), so the run, explain and device pages of a run share one build."""
        st = state.store()
        try:
            rid = st.resolve_id(ref)
        except StoreError as e:
            raise HTTPException(404, str(e)) from None
        key = (rid, *st.counts(rid), *files_state(st, rid))
        with views_lock:
            if key in views:
                views.move_to_end(key)
                return rid, views[key]
        data = load_run(st, rid)
        text = view_json(data, device=device_view(st, rid, data))
        with views_lock:
            views[key] = text
            while len(views) > 8:
                views.popitem(last=False)
        return rid, text

    def run_page(page: str):
        def handler(request: Request) -> HTMLResponse:
            t = time.perf_counter()
            rid, text = cached_view(request.path_params["run_id"])
            html = render_page(rid, text, page=page, nav=run_nav(rid, page), static_base="/static",
                               heading={"run": None, "explain": "explain", "device": "device"}[page])
            return HTMLResponse(html, headers={"Server-Timing": f"render;dur={1e3 * (time.perf_counter() - t):.1f}"})
        return handler

    def report_file(request: Request) -> HTMLResponse:
        rid, text = cached_view(request.path_params["run_id"])
        return HTMLResponse(render_page(rid, text), headers={
            "Content-Disposition": f'attachment; filename="stepscope-{rid}.html"'})

    def export(request: Request) -> Response:
        from ...output.export.chrome import to_chrome_trace
        from ...output.export.speedscope import to_speedscope

        fmt = request.path_params["fmt"]
        if fmt not in ("speedscope", "chrome"):
            raise HTTPException(404, f"no export format {fmt!r} (speedscope or chrome)")
        st, data = _load(request.path_params["run_id"])
        if fmt == "speedscope":
            doc = to_speedscope(data)
        else:
            from ...device.runview import clock_map

            trace = run_trace(st, data.run.id)
            doc = to_chrome_trace(data, device=(trace, clock_map(trace)) if trace is not None else None)
        return Response(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json", headers={
            "Content-Disposition": f'attachment; filename="{data.run.id}.{fmt}.json"'})

    tables: OrderedDict = OrderedDict()  # (run id, spans) -> (SpanTable, depths, run start ns)
    tables_lock = threading.Lock()

    def api_spans(request: Request) -> Response:
        """``GET /api/runs/{id}/spans?t0=&t1=``: the spans of a window (us from the run's start), for the
        waterfall of a large run when zoomed (``output.html.view.window_spans``)."""
        from ...store.reader import read_spans
        from ...output.html.view import table_depths, window_spans

        st = state.store()
        try:
            rid = st.resolve_id(request.path_params["run_id"])
            t0 = float(request.query_params.get("t0", "0"))
            t1 = float(request.query_params.get("t1", "inf"))
        except StoreError as e:
            raise HTTPException(404, str(e)) from None
        except ValueError:
            raise HTTPException(400, "t0, t1: numbers (us from the run's start)") from None
        if not t1 >= t0:
            raise HTTPException(400, "t1 must not be before t0")
        key = (rid, st.counts(rid)[0])
        with tables_lock:
            hit = tables.get(key)
            if hit is not None:
                tables.move_to_end(key)
        if hit is None:
            t = read_spans(st, rid)
            hit = (t, table_depths(t), st.get_run(rid).start_ns)
            with tables_lock:
                tables[key] = hit
                while len(tables) > 2:
                    tables.popitem(last=False)
        t, dep, start = hit
        doc = window_spans(t, dep, start, t0, min(t1, 1e15))
        return Response(orjson.dumps(doc), media_type="application/json")

    def api_view(request: Request) -> Response:
        _, text = cached_view(request.path_params["run_id"])
        return Response(text, media_type="application/json")  # "\\u003c" etc. are JSON's own escapes

    def bench_list(request: Request) -> HTMLResponse:
        from ...store import bench as bench_store

        items = []
        for b in bench_store.list_benches(state.store()):
            cmd = b["command"]
            items.append({"id": b["id"], "created": b["created_wall_ns"], "status": b["status"],
                          "configs": len(b["labels"]), "kind": b["kind"] or "-",
                          "command": " ".join(cmd) if isinstance(cmd, list) else cmd,
                          "recommendation": _recommendation(b["id"]) if b["kind"] == "try" else None})
        return HTMLResponse(env.get_template("benches.html.j2").render(title="benchmarks", items=items))

    def _recommendation(bench_id: str) -> str | None:
        from ...fixes.verdict import try_verdict
        from ...store import bench as bench_store

        try:
            return try_verdict(bench_store.load(state.store(), bench_id)).recommendation
        except StoreError:
            return None

    def _bench(bench_id: str):
        from ...bench.results import verdict
        from ...store import bench as bench_store

        try:
            b = bench_store.load(state.store(), bench_store.resolve(state.store(), bench_id))
        except StoreError as e:
            raise HTTPException(404, str(e)) from None
        return b, verdict(b)

    def api_bench(request: Request) -> Response:
        """``GET /api/bench/{id}``: what ``bench show --json`` prints: the benchmark, its verdict and, for a
        ``stepscope try`` benchmark, the try verdict (``fixes.verdict.TryVerdict``)."""
        b, v = _bench(request.path_params["bench_id"])
        doc = {"bench": b, "verdict": dataclasses.asdict(v)}
        if b["spec"].get("kind") == "try":
            from ...fixes.verdict import try_verdict

            doc["try"] = dataclasses.asdict(try_verdict(b))
        return Response(orjson.dumps(doc), media_type="application/json")

    def bench_view(request: Request) -> HTMLResponse:
        b, v = _bench(request.path_params["bench_id"])
        return HTMLResponse(bench_page(b, v, f"/bench/{b['id']}/plot.png" if any(r.times_s for r in v.rows) else None))

    def bench_plot(request: Request) -> Response:
        import tempfile
        from pathlib import Path

        from ...output.plots import plot_bench

        b, _ = _bench(request.path_params["bench_id"])
        with tempfile.TemporaryDirectory() as d:
            p = plot_bench(b, Path(d) / "plot.png")
            if p is None:
                raise HTTPException(404, f"benchmark {b['id']} has no timed runs to plot")
            png = p.read_bytes()
        return Response(png, media_type="image/png")

    def compare(request: Request) -> HTMLResponse:
        from ...analysis.diff import DiffError
        from .compare import compare_response

        return compare_response(state.store(), request.query_params, DiffError)

    def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == _UI_CSS:
            text = ui_css()
        elif name in STATIC_FILES:  # fixed names only: no path from the request reaches the file system
            text = static_text(name)
        else:
            raise HTTPException(404, "no such static file")
        return Response(text, media_type=_STATIC_TYPES[name[name.rindex("."):]], headers={"Cache-Control": "no-cache"})

    return [
        Route("/", index),
        Route("/api/transactions", api_transactions),
        Route("/runs/{run_id}", run_page("run")),
        Route("/runs/{run_id}/explain", run_page("explain")),
        Route("/runs/{run_id}/device", run_page("device")),
        Route("/runs/{run_id}/report.html", report_file),
        Route("/runs/{run_id}/export/{fmt}", export),
        Route("/api/runs/{run_id}/view", api_view),
        Route("/api/runs/{run_id}/spans", api_spans),
        Route("/compare", compare),
        Route("/bench", bench_list),
        Route("/bench/{bench_id}", bench_view),
        Route("/bench/{bench_id}/plot.png", bench_plot),
        Route("/api/bench/{bench_id}", api_bench),
        Route("/static/{name}", static),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
    ]
