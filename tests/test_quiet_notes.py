"""Issue 39, items 1 and 8: stepscope's notes on traced names (a method's overrides, a compiled region, a glob's
members that cannot be traced) are the first screen's: never printed under `run -q` (the program's stderr as
without stepscope); a glob's untraceable members are one count, not a list of names the user never wrote; the
first screen names only the overrides that ran (the run's `unresolved`, `--json`, keeps the whole note)."""

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import cli_env

from stepscope.analysis.summary import screen_notes
from stepscope.record.tracing.globs import is_note, members_note

MOD = textwrap.dedent("""\
    from dataclasses import dataclass


    @dataclass
    class P:
        x: int = 1

        def area(self):
            return self.x * 2


    class Impl:
        def hello(self):
            return 1


    class Leaf(Impl):
        def hello(self):
            return 2


    class Unused(Impl):
        def hello(self):
            return 3
    """)
PROG = "import sys, qnmod\nprint(qnmod.P().area(), qnmod.Leaf().hello())\nsys.stderr.write('program stderr\\n')\n"
NAMES = ["--trace", "qnmod.P.*", "--trace", "qnmod.Impl.hello"]


def _setup(tmp_path):
    (tmp_path / "qnmod.py").write_text(MOD)
    (tmp_path / "prog.py").write_text(PROG)
    env = cli_env(tmp_path / "store")
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    return env


def _run(args, env, cwd):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_quiet_run_prints_no_notes(tmp_path):
    env = _setup(tmp_path)
    plain = _run([sys.executable, "prog.py"], env, tmp_path)
    quiet = _run([sys.executable, "-m", "stepscope", "run", "-q", *NAMES, "--", sys.executable, "prog.py"], env, tmp_path)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (plain.returncode, plain.stdout, plain.stderr)


def test_first_screen_counts_glob_members_and_names_overrides_that_ran(tmp_path):
    env = _setup(tmp_path)
    r = _run([sys.executable, "-m", "stepscope", "run", *NAMES, "--", sys.executable, "prog.py"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "__delattr__" not in r.stderr and "__eq__" not in r.stderr and "(in part)" not in r.stderr, r.stderr
    if sys.version_info < (3, 12):  # (3.11 instruments a function's source: a dataclass's made methods have none)
        assert "glob: qnmod.P.*: 3 members cannot be traced (no source)" in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("overrides: ")]
    assert lines == ["overrides: qnmod.Impl.hello: overridden in 2 subclasses, 1 of which ran: each override traced "
                     "as a span of its own class (qnmod.Leaf.hello)"], r.stderr
    doc = json.loads(_run([sys.executable, "-m", "stepscope", "run", "--json", *NAMES, "--", sys.executable, "prog.py"],
                          env, tmp_path).stdout.splitlines()[-1])  # (after the program's own line)
    assert doc["run"]["unresolved"]["qnmod.Impl.hello"] == (  # --json keeps the whole note
        "overridden in 2 subclasses: each override traced as a span of its own class (qnmod.Leaf.hello, qnmod.Unused.hello)")
    assert "notes" not in doc["run"]


def test_first_screen_leaves_out_overrides_that_never_ran(tmp_path):
    env = _setup(tmp_path)
    (tmp_path / "prog.py").write_text("import qnmod\nprint(qnmod.Impl().hello())\n")
    r = _run([sys.executable, "-m", "stepscope", "run", "--trace", "qnmod.Impl.hello", "--", sys.executable, "prog.py"],
             env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "overrid" not in r.stderr, r.stderr


@pytest.mark.parametrize("overrides,ran,want", [
    ({"m.B.f": ["m.C.f", "m.D.f"]}, {"m.D.f"},
     "overridden in 2 subclasses, 1 of which ran: each override traced as a span of its own class (m.D.f)"),
    ({"m.B.f": ["m.C.f", "m.D.f"]}, {"m.C.f", "m.D.f"},
     "overridden in 2 subclasses: each override traced as a span of its own class (m.C.f, m.D.f)"),
    ({"m.B.f": ["m.C.f", "m.D.f"]}, {"m.B.f"}, None),
    ({}, {"m.D.f"},  # an older run without env["overrides"]: the names its note shows
     "overridden in 2 subclasses, 1 of which ran: each override traced as a span of its own class (m.D.f)"),
])
def test_screen_notes(overrides, ran, want):
    note = "overridden in 2 subclasses: each override traced as a span of its own class (m.C.f, m.D.f)"
    got = screen_notes({"m.B.f": note, "x.y": "module 'x' was never imported"}, overrides, ran)
    assert got == ({"m.B.f": want} if want else {}) | {"x.y": "module 'x' was never imported"}


def test_members_note_is_a_count():
    failed = {"m.P.__eq__": "no source for <string>", "m.P.__init__": "no source for <string>",
              "m.P.size": "m.P.size is a property; trace its getter's function instead"}
    assert members_note(failed) == "3 members cannot be traced (2 no source, 1 properties)"
    assert is_note(members_note(failed))
    assert members_note({"m.P.__eq__": "no source for <string>"}, matched_any=False) == \
        "1 member matched, none can be traced (no source)"
    assert not is_note(members_note(failed, matched_any=False))
