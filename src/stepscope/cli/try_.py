"""``stepscope try``: measure fixes on the user's own diffusers program, unmodified.

stepscope try --fix sdpa,compile,channels_last -- python txt2img.py --steps 20
stepscope try --fix all --repeats 5 --json -- python txt2img.py
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import click

from ..core import limits
from ..fixes import COMPILE_MODES, parse
from .common import JsonOpt, StoreOpt, UserError, argument, command, err, handles_errors, open_store, out, print_json

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


@command("try", context_settings=CONTEXT)
@argument("command", nargs=-1, help="-- python SCRIPT [ARGS]")
@click.option("--fix", required=True, help="Fixes, comma-separated, or all: sdpa, sdpa-flash, sdpa-efficient, "
              "sdpa-cudnn, compile, channels_last, fp16, bf16, vae-tiling, vae-slicing, fuse-qkv, no-offload, "
              "sync-free-scheduler.")
@click.option("--repeats", type=int, default=5, help="Timed pipeline calls per configuration, interleaved.")
@click.option("--compile-mode", default="default", help="torch.compile mode: " + ", ".join(COMPILE_MODES))
@click.option("--seed", type=int, default=0, help="torch.manual_seed before each measured call.")
@click.option("--combine/--no-combine", default=True, help="Also measure the fixes that helped together.")
@StoreOpt
@JsonOpt
@click.pass_context
@handles_errors
def try_cmd(ctx: click.Context, command: tuple[str, ...], fix: str, repeats: int, compile_mode: str, seed: int,
            combine: bool, store: Optional[Path], as_json: bool) -> None:
    """Apply fixes to a diffusers program at its first pipeline call, each configuration in its own process, and
    measure them against the program as it is: time per denoising step and per call, peak memory, output change."""
    from ..output.plots import plot_bench
    from ..fixes.parent import Plan, TryError, run_try
    from ..fixes.verdict import try_verdict
    from ..output.terminal.try_ import print_try
    from ..program.run import CommandError
    from ..store import bench as bench_store

    fixes = parse(fix)
    limits.in_range("--repeats", repeats, 2, 10_000, integer=True)
    if compile_mode not in COMPILE_MODES:
        raise UserError(f"--compile-mode: expected one of {', '.join(COMPILE_MODES)}, got {compile_mode!r}")
    words = [w for w in list(command or []) + list(ctx.args)]
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise UserError("no program: stepscope try --fix FIXES -- python SCRIPT [ARGS]")
    st = open_store(store, create=True)
    plan = Plan(words, fixes, repeats, compile_mode, seed, combine)
    with err.status("starting the baseline", spinner="dots") if not as_json else _Nothing() as status:
        try:
            bench_id = run_try(plan, st, (lambda m: status.update(m)) if status is not None else None)
        except CommandError as e:
            raise UserError(str(e)) from None
        except TryError as e:
            err.print(f"stepscope: {e}", markup=False, highlight=False)
            raise SystemExit(1)
    b = bench_store.load(st, bench_id)
    v = try_verdict(b)
    png = plot_bench(b, st.path / "bench" / f"{bench_id}.png")  # the step and the call per configuration
    if as_json:
        print_json({"bench_id": bench_id, "verdict": dataclasses.asdict(v), "bench": b,
                    "plot": str(png) if png else None})
        return
    print_try(v, out)
    if png is not None:
        err.print(f"plot: {png}")
    if b["status"] == "interrupted":
        err.print("[yellow]interrupted: the finished runs are kept[/yellow]")


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
