"""The command line's start (issue 42): click directly, each subcommand's module imported only when it is named,
``stepscope --help`` from the table in ``cli/main.py`` (no subcommand imported), nothing heavy at module level.
The times themselves are ``benchmarks/cli_startup.py``'s, not a test's."""

import subprocess
import sys

import pytest
from conftest import run_cli
from stepscope.cli.main import COMMANDS, load, shorten

HEAVY = ("numpy", "typer", "pydantic", "rich.console", "stepscope.store.db", "stepscope.analysis", "stepscope.output")


def _imported_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after ``code`` (the CLI called in-process: SystemExit caught)."""
    prog = (f"import sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\n"
            "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    return set(r.stderr.split())


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY)))


def test_help_lists_every_subcommand_with_its_short_help(store):
    r = run_cli(["--help"], store)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("Commands:\n", 1)[1].splitlines()
    listed = {ln.split()[0]: ln.split(None, 1)[1] for ln in lines if ln.strip()}
    assert list(listed) == list(COMMANDS)
    for name, text in listed.items():
        short = COMMANDS[name].short
        assert short.startswith(text.removesuffix("...")), (name, text)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_tables_short_help_is_the_first_line_of_the_commands_help(name):
    cmd = load(name)
    assert cmd.name == name
    assert COMMANDS[name].short == cmd.help.strip().splitlines()[0].strip()
    # listed from the table as click would list it from the command (at most 78 columns wide: a limit of 65 here)
    for limit in (20, 45, 60, 65):
        assert shorten(COMMANDS[name].short, limit) == cmd.get_short_help_str(limit), limit


def test_importing_the_cli_imports_no_numpy_typer_or_pydantic():
    mods = _imported_after("import stepscope.cli.main, stepscope.cli.common")
    assert "stepscope.cli.main" in mods and "click" in mods
    assert not _heavy(mods), _heavy(mods)


def test_help_imports_no_subcommand():
    mods = _imported_after("from stepscope.cli.main import app; app(['--help'], prog_name='stepscope')")
    subs = sorted(m for m in mods if m.startswith("stepscope.cli.") and m not in ("stepscope.cli.main",
                                                                                 "stepscope.cli.common"))
    assert not subs and not _heavy(mods), (subs, _heavy(mods))


@pytest.mark.parametrize("name", ["runs", "explain", "device", "diff", "report", "export", "bench", "keys"])
def test_a_subcommands_help_imports_nothing_heavy(name):
    mods = _imported_after(f"from stepscope.cli.main import app; app([{name!r}, '--help'], prog_name='stepscope')")
    assert f"stepscope.cli.{name}" in mods
    assert not _heavy(mods), _heavy(mods)


def test_runs_on_an_empty_store_imports_no_numpy(tmp_path):
    from stepscope.store import Store

    Store(tmp_path / "s", create=True).close()
    mods = _imported_after(f"from stepscope.cli.main import app; app(['runs', '--store', {str(tmp_path / 's')!r}], "
                           "prog_name='stepscope')")
    assert "stepscope.store.db" in mods and "numpy" not in mods and "typer" not in mods


def test_export_formats_are_the_writers_and_the_senders():
    from stepscope.cli.export import _ALL
    from stepscope.output.export import FORMATS

    assert _ALL == (*FORMATS, "otlp", "sentry")


def test_options_keep_their_types_defaults_and_repeatables(store):
    """``bench``'s default command: the group's repeatable options reach it as typer gave them (a command without
    {args} but with --args is refused by the spec, one line); a bad number is click's usage error (status 2)."""
    r = run_cli(["bench", "--args", "a", "--args", "b", "--", "python", "-c", "pass"], store)
    assert r.returncode == 2 and r.stderr.strip() == "stepscope: error: --args given but the command has no {args} " \
                                                    "placeholder"
    r = run_cli(["runs", "-n", "x"], store)
    assert r.returncode == 2 and "Invalid value for '--limit' / '-n'" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(["runs", "--limit", "-1"], store)
    assert r.returncode == 2 and r.stderr.strip() == "stepscope: error: --limit: must be an integer between 0 and " \
                                                    "1000000, got -1"
