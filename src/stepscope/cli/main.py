"""``stepscope``: the command-line entry point. Each subcommand lives in its own module."""

from __future__ import annotations

import typer

from . import bench, capture, demo, device, diff, explain, export, keys, report, run, runs, serve, suggest

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Trace, sample and explain the performance of Python/ML programs you did not write.")
app.command("run", context_settings=run.CONTEXT)(run.run)
app.command("demo")(demo.demo)
app.command("runs")(runs.runs)
app.command("rm")(runs.rm)
app.command("report")(report.report)
app.command("export")(export.export)
app.command("explain")(explain.explain_cmd)
app.command("diff")(diff.diff_cmd)
app.command("suggest")(suggest.suggest_cmd)
app.command("device")(device.device)
app.add_typer(bench.app, name="bench")
app.command("capture")(capture.capture_cmd)
app.command("serve")(serve.serve)
app.add_typer(keys.app, name="keys")

if __name__ == "__main__":
    app()
