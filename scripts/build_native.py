"""Build ``stepscope.record.native._native`` and ``stepscope.device.native._kscan`` in place for the interpreter
running this script, from the recipes in setup.py (``native_extensions()``: sources, headers, flags, libraries; read,
never repeated here), with this
interpreter's own compiler settings (``sysconfig``: CC, LDSHARED, include folder, extension suffix) and no
setuptools: for the interpreters that run stepscope from ``PYTHONPATH=src`` (the tests' 3.12 and 3.13, whose
virtualenvs have no setuptools). Each interpreter's ``.so`` carries its ABI tag, so several live side by side in
src/stepscope/record/native/ and src/stepscope/device/native/ (git-ignored).

    python3.12 scripts/build_native.py [--quiet]

Exit code 0 when built (or already newer than every source and header), 1 when the compiler failed (its output
printed).
"""

import os
import runpy
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def recipe() -> dict:
    """setup.py's ``native_sources()`` (``setuptools.Extension`` keyword arguments, paths relative to ROOT)."""
    return runpy.run_path(str(ROOT / "setup.py"), run_name="stepscope_setup")["native_sources"]()


def recipes() -> list[dict]:
    """Every extension's recipe: setup.py's ``native_extensions()``."""
    return runpy.run_path(str(ROOT / "setup.py"), run_name="stepscope_setup")["native_extensions"]()


def target(spec: dict | None = None) -> Path:
    """The extension's path for this interpreter (src/stepscope/record/native/_native<EXT_SUFFIX>)."""
    spec = spec or recipe()
    return ROOT / "src" / Path(*spec["name"].split(".")).with_suffix(sysconfig.get_config_var("EXT_SUFFIX"))


def build(quiet: bool = False) -> int:
    """``build_one`` for every extension (setup.py's ``native_extensions()``). Returns 0, or 1 when the compiler
    failed for one."""
    return max(build_one(spec, quiet) for spec in recipes())


def build_one(spec: dict, quiet: bool = False) -> int:
    """Compile and link a recipe's sources into its ``target()`` if it is missing or older than a source or header.
    Returns 0, or 1 when the compiler failed."""
    out = target(spec)
    sources = [ROOT / s for s in spec["sources"]]
    inputs = [*sources, *(ROOT / d for d in spec["depends"]), ROOT / "setup.py"]
    if out.exists() and out.stat().st_mtime >= max(f.stat().st_mtime for f in inputs):
        return 0
    cv = sysconfig.get_config_var
    cc = shlex.split(os.environ.get("CC") or cv("CC") or "cc")
    ldshared = shlex.split(cv("LDSHARED") or "cc -shared")[1:]
    tmp = f"{out}.{os.getpid()}.tmp"  # its own: two processes (pytest-xdist workers) may build at once
    cmd = [*cc, *ldshared, "-fPIC", *spec["extra_compile_args"], f"-I{sysconfig.get_paths()['include']}",
           *map(str, sources), "-o", tmp, *(f"-l{lib}" for lib in spec["libraries"])]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        print(" ".join(cmd), p.stdout, p.stderr, sep="\n", file=sys.stderr)
        if os.path.exists(tmp):
            os.unlink(tmp)
        return 1
    os.replace(tmp, out)  # atomic: a process that loads the extension meanwhile gets the old one or the new one
    if not quiet:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(build("--quiet" in sys.argv))
