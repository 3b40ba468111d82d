"""``stepscope bench``: benchmark fixes as a configuration matrix with honest statistics.

stepscope bench sd --model tiny --attention classic,sdpa --compile off,default --repeats 5
stepscope bench --config bench.toml
stepscope bench --args "--attn classic" --args "--attn sdpa" -- python script.py {args}
stepscope bench show [ID] | compare ID ID | plot ID
"""

from __future__ import annotations

import base64
import csv
import dataclasses
from pathlib import Path
from typing import List, Optional

import click
import typer
from typer.core import TyperGroup

from ..bench import results as bench_results
from ..bench.plots import plot as plot_png
from ..output.plots import plot_bench
from ..bench.matrix import run_bench
from ..bench.spec import Spec, SpecError, command_spec, from_toml, sd_spec
from ..bench.stats import compare as compare_times
from ..output.terminal.bench import print_verdict
from ..store import bench as bench_store
from .common import JsonOpt, StoreOpt, UserError, err, handles_errors, open_store, out, print_json


class _CommandDefault(TyperGroup):
    """``stepscope bench -- python x.py {args}``: a first word that is no subcommand starts a command benchmark."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.commands:
            return "cmd", self.commands["cmd"], args
        return super().resolve_command(ctx, args)


app = typer.Typer(cls=_CommandDefault, invoke_without_command=True, no_args_is_help=False, add_completion=False,
                  help="Benchmark fixes: a configuration matrix in isolated processes, interleaved repeats, CIs.")


def _split(values: Optional[List[str]]) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def _finish(spec: Spec, store: Optional[Path], as_json: bool, time_file: Optional[Path]) -> None:
    st = open_store(store, create=True)
    total = len(spec.configs) * (spec.warmup + spec.repeats)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=True, disable=as_json) as bar:
        task = bar.add_task("starting", total=total)

        def progress(msg: str) -> None:
            if not msg.startswith("setting up") and bar.tasks[0].description != "starting":
                bar.advance(task)
            bar.update(task, description=msg)

        bench_id = run_bench(spec, st, progress)
    b = bench_store.load(st, bench_id)
    v = bench_results.verdict(b)
    png = st.path / "bench" / f"{bench_id}.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    if any(r.times_s for r in v.rows):
        plot_png(v, png)
    if time_file is not None:
        _write_time_files(v, time_file)
    if as_json:
        print_json({"bench": b, "verdict": dataclasses.asdict(v), "plot": str(png) if png.exists() else None})
        return
    print_verdict(v, out)
    if png.exists():
        err.print(f"plot: {png}")
    if b["status"] == "interrupted":
        err.print("[yellow]interrupted: the finished runs are kept[/yellow]")


def _write_time_files(v: bench_results.Verdict, path: Path) -> None:
    """Plain seconds, one timed run per line (as the seed's scripts wrote); one file per configuration."""
    rows = [r for r in v.rows if r.times_s]
    for r in rows:
        p = path if len(rows) == 1 else path.with_name(f"{path.stem}.{r.index}{path.suffix}")
        p.write_text("".join(f"{t:.6f}\n" for t in r.times_s))


@app.callback()
@handles_errors
def bench(ctx: typer.Context,
          config: Optional[Path] = typer.Option(None, "--config", help="Matrix from a TOML file."),
          args: List[str] = typer.Option([], "--args", help="For a command: an argument set for {args} (repeatable)."),
          warmup: int = typer.Option(1, "--warmup", help="For a command: untimed runs per configuration."),
          repeats: int = typer.Option(5, "--repeats", help="For a command: timed runs per configuration."),
          baseline: Optional[str] = typer.Option(None, "--baseline", help="For a command: e.g. args=--x 1."),
          trace: List[str] = typer.Option([], "--trace", help="For a command: record each run with this traced (and "
                                          "the step rules): its denoising steps are timed too (repeatable)."),
          step: List[str] = typer.Option([], "--step", help="For a command: a function each call of which is a step "
                                         "(as stepscope run --step; repeatable)."),
          app: Optional[str] = typer.Option(None, "--app", help="For a command: record each run with an app preset "
                                            "(comfyui, invokeai, diffusers): its steps are timed too."),
          store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt,
          time_file: Optional[Path] = typer.Option(None, "--time-file", help="Write plain seconds per timed run.")) -> None:
    """Benchmark fixes: `bench sd ...`, `bench --config F`, or `bench [--args SET]... -- python x.py {args}`."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        print(ctx.get_help())
        raise typer.Exit(0)
    try:
        spec = from_toml(config)
    except SpecError as e:
        raise UserError(str(e)) from None
    _finish(spec, store, as_json, time_file)


@app.command("sd")
@handles_errors
def sd(model: List[str] = typer.Option(["tiny"], "--model", help="tiny, sd15 or a model folder (comma-separated)."),
       attention: List[str] = typer.Option(["sdpa"], "--attention", help="classic, sdpa, sdpa-math, sdpa-efficient, sdpa-flash, sdpa-cudnn."),
       compile: List[str] = typer.Option(["off"], "--compile", help="off, default, reduce-overhead, max-autotune, eager."),
       dtype: List[str] = typer.Option(["float32"], "--dtype"),
       batch: List[str] = typer.Option(["1"], "--batch"),
       size: List[str] = typer.Option([""], "--size", help="Image size in px (default: the model's)."),
       steps: List[str] = typer.Option(["10"], "--steps"),
       channels_last: List[str] = typer.Option(["false"], "--channels-last"),
       target: str = typer.Option("pipeline", "--target", help="pipeline, or unet (the UNet forward alone)."),
       warmup: int = typer.Option(1, "--warmup", help="Untimed iterations per configuration."),
       repeats: Optional[int] = typer.Option(None, "--repeats", help="Timed iterations per configuration, interleaved "
                                             "[default: 5; 1 per value with --max-batch/--max-size]."),
       baseline: Optional[str] = typer.Option(None, "--baseline", help="e.g. attention=classic (default: the first)."),
       time_file: Optional[Path] = typer.Option(None, "--time-file", help="Write plain seconds per timed run."),
       max_batch: bool = typer.Option(False, "--max-batch", help="Find the largest batch that runs without running out "
                                      "of memory (doubling, then bisection; each value in a fresh worker)."),
       max_size: bool = typer.Option(False, "--max-size", help="Find the largest image size instead (at --batch)."),
       memory_limit: Optional[str] = typer.Option(None, "--memory-limit", help="With --max-batch/--max-size: the "
                                                  "memory budget per worker, e.g. 8GiB (RLIMIT_AS: address space)."),
       up_to: Optional[int] = typer.Option(None, "--up-to", help="With --max-batch/--max-size: the largest value tried."),
       store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """A Stable Diffusion matrix: each configuration in its own process (or, with --max-batch, the largest batch
    that fits: stepscope bench sd --max-batch --size 512 --memory-limit 8GiB)."""
    matrix = {"model": _split(model), "attention": _split(attention), "compile": _split(compile), "dtype": _split(dtype),
              "batch": _split(batch), "size": _split(size) or [""], "steps": _split(steps),
              "channels_last": _split(channels_last), "target": [target]}
    if max_batch or max_size:
        _max(matrix, "batch" if max_batch else "size", max_batch and max_size, memory_limit, up_to, warmup,
             repeats if repeats is not None else 1, store, as_json)
        return
    if memory_limit is not None or up_to is not None:
        raise UserError("--memory-limit and --up-to go with --max-batch or --max-size")
    try:
        spec = sd_spec(matrix, warmup, repeats if repeats is not None else 5, baseline)
    except SpecError as e:
        raise UserError(str(e)) from None
    _finish(spec, store, as_json, time_file)


def _max(matrix: dict, dimension: str, both: bool, memory_limit: Optional[str], up_to: Optional[int], warmup: int,
         repeats: int, store: Optional[Path], as_json: bool) -> None:
    """``--max-batch`` / ``--max-size``: one configuration, searched in fresh workers; stored as a benchmark."""
    from ..bench import maxbatch
    from ..output.terminal.maxbatch import plot_curve, print_max
    from ..bench.matrix import new_bench_id

    if both:
        raise UserError("--max-batch and --max-size: one at a time")
    if dimension == "batch" and matrix["target"] != ["pipeline"]:
        raise UserError("--max-batch: --target pipeline only")
    try:
        spec = sd_spec(matrix, warmup, repeats, None)
        limit = maxbatch.parse_bytes(memory_limit) if memory_limit is not None else None
        if up_to is not None:
            from ..core import limits

            limits.in_range("--up-to", up_to, 1, 1_000_000, integer=True)
    except (SpecError, ValueError) as e:
        raise UserError(str(e)) from None
    if len(spec.configs) != 1:
        raise UserError(f"--max-{dimension}: one configuration at a time (the options give {len(spec.configs)})")
    cfg = spec.configs[0]
    st = open_store(store, create=True)
    bench_id = new_bench_id()
    with err.status(f"searching the largest {dimension}...") as status:
        result = maxbatch.find_max(cfg, dimension, limit, repeats, warmup, up_to,
                                   say=lambda s: status.update(f"largest {dimension}: {s}"))
    probes = result.probes
    bench_store.create(st, bench_id, {"kind": f"max-{dimension}", "configs": [dict(cfg, **{dimension: p.value}) for p in probes],
                                      "warmup": warmup, "repeats": repeats, "baseline": 0, "command": [],
                                      "memory_limit": limit}, [f"{dimension}={p.value}" for p in probes])
    for i, p in enumerate(probes):
        if p.times_s:
            for k, t in enumerate(p.times_s):
                bench_store.add_run(st, bench_id, i, k, False, t, None, p.peak_bytes, None)
        else:
            bench_store.add_run(st, bench_id, i, 0, False, None, None, None, p.error or "did not fit")
    bench_store.update(st, bench_id, status="ok", notes={"max": result.to_dict()})
    png = st.path / "bench" / f"{bench_id}.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    plotted = plot_curve(result, png)
    if as_json:
        print_json({"bench_id": bench_id, "max": result.to_dict(), "plot": str(plotted) if plotted else None})
        return
    print_max(result, out)
    if plotted:
        err.print(f"plot: {plotted}")


@app.command("cmd", hidden=True, context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                                   "allow_interspersed_args": False})
@handles_errors
def cmd(ctx: typer.Context, command: Optional[List[str]] = typer.Argument(None)) -> None:
    """Any command, once per run in a fresh process: stepscope bench --args A --args B -- python x.py {args}"""
    opts = ctx.parent.params
    words = [w for w in list(command or []) + list(ctx.args) if w != "--"]
    try:
        record = [x for n in opts["trace"] for x in ("--trace", n)] + [x for n in opts["step"] for x in ("--step", n)]
        if opts["app"]:
            record += ["--app", opts["app"]]
        spec = command_spec(words, list(opts["args"]), opts["warmup"], opts["repeats"], opts["baseline"], record)
    except SpecError as e:
        raise UserError(str(e)) from None
    tf = opts["time_file"]  # the group's raw value (a str with typer < 0.29)
    _finish(spec, opts["store"], opts["as_json"], Path(tf) if tf is not None else None)


@app.command("show")
@handles_errors
def show(bench_id: Optional[str] = typer.Argument(None), store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt,
         csv_file: Optional[Path] = typer.Option(None, "--csv", help="Write every run as CSV."),
         html: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML page.")) -> None:
    """The verdict table of a benchmark (default: the last one)."""
    st = open_store(store)
    b = bench_store.load(st, bench_store.resolve(st, bench_id))
    v = bench_results.verdict(b)
    if csv_file is not None:
        with csv_file.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["config", "label", "repeat", "warmup", "wall_s", "peak_bytes", "error"])
            for r in b["runs"]:
                w.writerow([r["config"], b["labels"][r["config"]], r["repeat"], int(r["warmup"]), r["wall_s"],
                            r["peak_bytes"], r["error"] or ""])
    if html is not None:
        _write_html(b, v, html)
    tv = None
    if b["spec"].get("kind") == "try":  # `stepscope try`: its own table (step and call, output change)
        from ..fixes.verdict import try_verdict

        tv = try_verdict(b)
    if as_json:
        print_json({"bench": b, "verdict": dataclasses.asdict(v)} | ({"try": dataclasses.asdict(tv)} if tv else {}))
    elif tv is not None:
        from ..output.terminal.try_ import print_try

        print_try(tv, out)
    else:
        print_verdict(v, out)


def _write_html(b: dict, v: bench_results.Verdict, path: Path) -> None:
    """The web UI's benchmark page as one file (CSS and plot inlined)."""
    import tempfile

    from ..serve.web.templating import bench_page

    with tempfile.TemporaryDirectory() as d:
        png = plot_bench(b, Path(d) / "p.png")
        src = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode() if png else None
    path.write_text(bench_page(b, v, src, standalone=True), encoding="utf-8")


@app.command("compare")
@handles_errors
def compare_cmd(first: str = typer.Argument(...), second: str = typer.Argument(...), store: Optional[Path] = StoreOpt,
                as_json: bool = JsonOpt) -> None:
    """Compare two benchmarks configuration by configuration (same labels): change of the second vs the first."""
    st = open_store(store)
    a = bench_results.verdict(bench_store.load(st, bench_store.resolve(st, first)))
    b = bench_results.verdict(bench_store.load(st, bench_store.resolve(st, second)))
    rows = []
    for rb in b.rows:
        ra = next((r for r in a.rows if r.label == rb.label and r.times_s), None)
        if ra is None or not rb.times_s:
            continue
        c = compare_times(rb.times_s, ra.times_s)
        rows.append({"label": rb.label, "first_median_s": ra.stats.median, "second_median_s": rb.stats.median,
                     "change": c.change, "ci_low": c.ci_low, "ci_high": c.ci_high, "significant": c.significant})
    if not rows:
        raise UserError(f"{a.bench_id} and {b.bench_id} share no configuration with timed runs")
    if as_json:
        print_json({"first": a.bench_id, "second": b.bench_id, "rows": rows})
        return
    from rich.table import Table

    t = Table(title=f"{b.bench_id} vs {a.bench_id}", title_justify="left", show_edge=False)
    for col in ("configuration", "first", "second", "change", "95% CI", "verdict"):
        t.add_column(col, justify="left" if col in ("configuration", "verdict") else "right")
    for r in rows:
        t.add_row(r["label"], f"{r['first_median_s']:.3f} s", f"{r['second_median_s']:.3f} s", f"{100 * r['change']:+.1f}%",
                  f"{100 * r['ci_low']:+.1f} .. {100 * r['ci_high']:+.1f}",
                  "significant" if r["significant"] else "no significant difference")
    out.print(t)


@app.command("plot")
@handles_errors
def plot_cmd(bench_id: Optional[str] = typer.Argument(None), output: Optional[Path] = typer.Option(None, "-o", "--output"),
             store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Per-run plot (PNG): every run a point, medians as bars, a panel per batch size."""
    st = open_store(store)
    b = bench_store.load(st, bench_store.resolve(st, bench_id))
    p = plot_bench(b, output or Path(f"stepscope-{b['id']}.png"))
    if p is None:
        raise UserError(f"benchmark {b['id']} has no timed runs to plot")
    if as_json:
        print_json({"bench_id": b["id"], "plot": str(p)})
    else:
        out.print(f"plot: {p}")
