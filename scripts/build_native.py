"""Build ``stepscope.record._native`` in place for the interpreter running this script, with its own compiler
settings (``sysconfig``: CC, CFLAGS, include folder, extension suffix) and no setuptools: for the
interpreters that run stepscope from ``PYTHONPATH=src`` (the tests' 3.12 and 3.13). Each interpreter's
``.so`` carries its ABI tag, so several live side by side in src/stepscope/ (git-ignored).

    python3.12 scripts/build_native.py [--quiet]

Exit code 0 when built (or already newer than the source), 1 when the compiler failed (its output printed).
"""

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "stepscope" / "record"


def target() -> Path:
    """The extension's path for this interpreter (src/stepscope/record/_native<EXT_SUFFIX>)."""
    return SRC / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))


def build(quiet: bool = False) -> int:
    """Compile and link ``_native.c`` (with the ``_native_*.h`` it includes) if the ``.so`` is missing or older. Returns the compiler's exit code."""
    out, c = target(), SRC / "_native.c"
    if out.exists() and out.stat().st_mtime >= max(f.stat().st_mtime for f in [c, *SRC.glob("_native_*.h")]):
        return 0
    cv = sysconfig.get_config_var
    cc = shlex.split(os.environ.get("CC") or cv("CC") or "cc")
    ldshared = shlex.split(cv("LDSHARED") or "cc -shared")[1:]
    cmd = [*cc, *ldshared, "-fPIC", "-O2", "-std=c11", f"-I{sysconfig.get_paths()['include']}", str(c), "-o",
           str(out) + ".tmp", "-lpthread"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        print(" ".join(cmd), p.stdout, p.stderr, sep="\n", file=sys.stderr)
        return 1
    os.replace(str(out) + ".tmp", out)
    if not quiet:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(build("--quiet" in sys.argv))
