"""The benchmark page (no Starlette: ``stepscope bench show --html`` renders the same page as a self-contained
file); the templates' environment and filters: ``output/html/templating.py``."""

from __future__ import annotations

from markupsafe import Markup

from ...output.html.templating import env, ui_css


def bench_page(b: dict, v, plot_src: str | None, standalone: bool = False) -> str:
    """The benchmark page: verdict table, warnings, per-run plot (a ``stepscope try`` benchmark: its own table,
    ``fixes.verdict.try_verdict``: step and call changes, peak memory, warm-up, output change, the verdict, the
    fixes not applicable and the recommendation). ``b``: ``store.bench.load``'s dict;
    ``v``: its ``Verdict``; ``plot_src``: the plot's URL (or a ``data:`` URI), None without timed runs;
    ``standalone``: CSS inlined and no site navigation (a file that opens offline)."""
    from ...bench.results import mem_text

    css = Markup(ui_css()) if standalone else None
    if (b.get("spec") or {}).get("kind") == "try":  # `stepscope try`: its own table (fixes.verdict)
        import math

        from ...fixes.verdict import try_verdict, verdict_word

        tv = try_verdict(b)
        return env.get_template("try.html.j2").render(title=f"try {b['id']}", b=b, tv=tv,
                                                      plot_src=plot_src, mem_text=mem_text, verdict_word=verdict_word,
                                                      inf=math.inf, inline_css=css,
                                                      applied={f: w for r in tv.rows for f, w in r.applied.items()})
    return env.get_template("bench.html.j2").render(title=f"benchmark {b['id']}", b=b, v=v, plot_src=plot_src, mem_text=mem_text,
                                                    inline_css=css)
