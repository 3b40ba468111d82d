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
from typing import Optional, Sequence

import click

from .common import PATH, Group, JsonOpt, StoreOpt, UserError, argument, err, handles_errors, open_store, out, print_json

#: a command benchmark's words after ``--`` (as ``run``'s): passed through untouched
CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


class _CommandDefault(Group):
    """``stepscope bench -- python x.py {args}``: a first word that is no subcommand starts a command benchmark."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """The subcommand named first, else ``cmd`` with every word."""
        if args and args[0] not in self.commands:
            return "cmd", self.commands["cmd"], args
        return super().resolve_command(ctx, args)


def _split(values: Optional[Sequence[str]]) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def _finish(spec, store: Optional[Path], as_json: bool, time_file: Optional[Path]) -> None:
    """Run the benchmark ``spec`` (``bench.spec.Spec``) under a progress bar, store it, print its verdict."""
    from ..bench import results as bench_results
    from ..bench.matrix import run_bench
    from ..bench.plots import plot as plot_png
    from ..output.terminal.bench import print_verdict
    from ..store import bench as bench_store

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


def _write_time_files(v, path: Path) -> None:
    """Plain seconds, one timed run per line (as the seed's scripts wrote); one file per configuration."""
    rows = [r for r in v.rows if r.times_s]
    for r in rows:
        p = path if len(rows) == 1 else path.with_name(f"{path.stem}.{r.index}{path.suffix}")
        p.write_text("".join(f"{t:.6f}\n" for t in r.times_s))


@click.group("bench", cls=_CommandDefault, invoke_without_command=True, no_args_is_help=False,
             help="Benchmark fixes: a configuration matrix in isolated processes, interleaved repeats, CIs.")
@click.option("--config", type=PATH, default=None, help="Matrix from a TOML file.")
@click.option("--args", multiple=True, help="For a command: an argument set for {args} (repeatable).")
@click.option("--warmup", type=int, default=1, help="For a command: untimed runs per configuration.")
@click.option("--repeats", type=int, default=5, help="For a command: timed runs per configuration.")
@click.option("--baseline", default=None, help="For a command: e.g. args=--x 1.")
@click.option("--trace", multiple=True, help="For a command: record each run with this traced (and the step rules): "
              "its denoising steps are timed too (repeatable).")
@click.option("--step", multiple=True, help="For a command: a function each call of which is a step (as stepscope run "
              "--step; repeatable).")
@click.option("--app", default=None, help="For a command: record each run with an app preset (comfyui, invokeai, "
              "diffusers): its steps are timed too.")
@StoreOpt
@JsonOpt
@click.option("--time-file", type=PATH, default=None, help="Write plain seconds per timed run.")
@click.pass_context
@handles_errors
def bench(ctx: click.Context, config: Optional[Path], args: tuple[str, ...], warmup: int, repeats: int,
          baseline: Optional[str], trace: tuple[str, ...], step: tuple[str, ...], app: Optional[str],
          store: Optional[Path], as_json: bool, time_file: Optional[Path]) -> None:
    """Benchmark fixes: `bench sd ...`, `bench --config F`, or `bench [--args SET]... -- python x.py {args}`.

    (The group's help is its ``help=``.) A subcommand runs after this; ``cmd`` reads these options from
    ``ctx.parent.params``."""
    from ..bench.spec import SpecError, from_toml

    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        print(ctx.get_help())
        ctx.exit(0)
    try:
        spec = from_toml(config)
    except SpecError as e:
        raise UserError(str(e)) from None
    _finish(spec, store, as_json, time_file)


@bench.command("sd")
@click.option("--model", multiple=True, default=["tiny"], help="tiny, sd15 or a model folder (comma-separated).")
@click.option("--attention", multiple=True, default=["sdpa"], help="classic, sdpa, sdpa-math, sdpa-efficient, "
              "sdpa-flash, sdpa-cudnn.")
@click.option("--compile", multiple=True, default=["off"], help="off, default, reduce-overhead, max-autotune, eager.")
@click.option("--dtype", multiple=True, default=["float32"])
@click.option("--batch", multiple=True, default=["1"])
@click.option("--size", multiple=True, default=[""], help="Image size in px (default: the model's).")
@click.option("--steps", multiple=True, default=["10"])
@click.option("--channels-last", multiple=True, default=["false"])
@click.option("--target", default="pipeline", help="pipeline, or unet (the UNet forward alone).")
@click.option("--warmup", type=int, default=1, help="Untimed iterations per configuration.")
@click.option("--repeats", type=int, default=None, help="Timed iterations per configuration, interleaved [default: 5; "
              "1 per value with --max-batch/--max-size].")
@click.option("--baseline", default=None, help="e.g. attention=classic (default: the first).")
@click.option("--time-file", type=PATH, default=None, help="Write plain seconds per timed run.")
@click.option("--max-batch", is_flag=True, default=False, help="Find the largest batch that runs without running out "
              "of memory (doubling, then bisection; each value in a fresh worker).")
@click.option("--max-size", is_flag=True, default=False, help="Find the largest image size instead (at --batch).")
@click.option("--memory-limit", default=None, help="With --max-batch/--max-size: the memory budget per worker, e.g. "
              "8GiB (RLIMIT_AS: address space).")
@click.option("--up-to", type=int, default=None, help="With --max-batch/--max-size: the largest value tried.")
@StoreOpt
@JsonOpt
@handles_errors
def sd(model: tuple[str, ...], attention: tuple[str, ...], compile: tuple[str, ...], dtype: tuple[str, ...],
       batch: tuple[str, ...], size: tuple[str, ...], steps: tuple[str, ...], channels_last: tuple[str, ...],
       target: str, warmup: int, repeats: Optional[int], baseline: Optional[str], time_file: Optional[Path],
       max_batch: bool, max_size: bool, memory_limit: Optional[str], up_to: Optional[int], store: Optional[Path],
       as_json: bool) -> None:
    """A Stable Diffusion matrix: each configuration in its own process (or, with --max-batch, the largest batch
    that fits: stepscope bench sd --max-batch --size 512 --memory-limit 8GiB)."""
    from ..bench.spec import SpecError, sd_spec

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
    from ..bench.matrix import new_bench_id
    from ..bench.spec import SpecError, sd_spec
    from ..output.terminal.maxbatch import plot_curve, print_max
    from ..store import bench as bench_store

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


@bench.command("cmd", hidden=True, context_settings=CONTEXT)
@argument("command", nargs=-1)
@click.pass_context
@handles_errors
def cmd(ctx: click.Context, command: tuple[str, ...]) -> None:
    """Any command, once per run in a fresh process: stepscope bench --args A --args B -- python x.py {args}"""
    from ..bench.spec import SpecError, command_spec

    opts = ctx.parent.params
    words = [w for w in list(command or []) + list(ctx.args) if w != "--"]
    try:
        record = [x for n in opts["trace"] for x in ("--trace", n)] + [x for n in opts["step"] for x in ("--step", n)]
        if opts["app"]:
            record += ["--app", opts["app"]]
        spec = command_spec(words, list(opts["args"]), opts["warmup"], opts["repeats"], opts["baseline"], record)
    except SpecError as e:
        raise UserError(str(e)) from None
    _finish(spec, opts["store"], opts["as_json"], opts["time_file"])  # (the group's values, converted: a Path)


@bench.command("show")
@argument("bench_id", required=False)
@StoreOpt
@JsonOpt
@click.option("--csv", "csv_file", type=PATH, default=None, help="Write every run as CSV.")
@click.option("--html", type=PATH, default=None, help="Write a self-contained HTML page.")
@handles_errors
def show(bench_id: Optional[str], store: Optional[Path], as_json: bool, csv_file: Optional[Path],
         html: Optional[Path]) -> None:
    """The verdict table of a benchmark (default: the last one)."""
    from ..bench import results as bench_results
    from ..output.terminal.bench import print_verdict
    from ..store import bench as bench_store

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


def _write_html(b: dict, v, path: Path) -> None:
    """The web UI's benchmark page as one file (CSS and plot inlined)."""
    import tempfile

    from ..output.plots import plot_bench

    from ..serve.web.templating import bench_page

    with tempfile.TemporaryDirectory() as d:
        png = plot_bench(b, Path(d) / "p.png")
        src = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode() if png else None
    path.write_text(bench_page(b, v, src, standalone=True), encoding="utf-8")


@bench.command("compare")
@argument("first")
@argument("second")
@StoreOpt
@JsonOpt
@handles_errors
def compare_cmd(first: str, second: str, store: Optional[Path], as_json: bool) -> None:
    """Compare two benchmarks configuration by configuration (same labels): change of the second vs the first."""
    from ..bench import results as bench_results
    from ..bench.stats import compare as compare_times
    from ..store import bench as bench_store

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


@bench.command("plot")
@argument("bench_id", required=False)
@click.option("-o", "--output", type=PATH, default=None)
@StoreOpt
@JsonOpt
@handles_errors
def plot_cmd(bench_id: Optional[str], output: Optional[Path], store: Optional[Path], as_json: bool) -> None:
    """Per-run plot (PNG): every run a point, medians as bars, a panel per batch size."""
    from ..output.plots import plot_bench
    from ..store import bench as bench_store

    st = open_store(store)
    b = bench_store.load(st, bench_store.resolve(st, bench_id))
    p = plot_bench(b, output or Path(f"stepscope-{b['id']}.png"))
    if p is None:
        raise UserError(f"benchmark {b['id']} has no timed runs to plot")
    if as_json:
        print_json({"bench_id": b["id"], "plot": str(p)})
    else:
        out.print(f"plot: {p}")
