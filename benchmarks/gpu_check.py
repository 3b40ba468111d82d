"""`make gpu-check`: prove stepscope's device story on a real CUDA GPU (issue 16), in one command.

    make gpu-wheels            # here, with the package registry: gpu-wheels/ (carried to the GPU machine)
    make gpu-check             # there: python3 benchmarks/gpu_check.py

On a machine without CUDA it says so in one line and exits 2. With CUDA it makes ``.gpu-venv`` (``venv
--system-site-packages``, so the machine's own torch with CUDA is used), says which of the needed packages it
found preinstalled, installs the rest with no index from ``gpu-wheels/`` (``pip install --no-index``) plus
stepscope itself, and runs ``benchmarks/gpu_checks.py`` there: an SD1.5-shaped pipeline with random weights at
512 px, float16, through ``stepscope run --device-trace --syncs``, ``stepscope device``, Holistic Trace Analysis,
``stepscope bench sd`` and plain/traced pairs of runs. It prints ONE table (check, figure, bound, PASS/FAIL/SKIP)
and, where ``$OUT`` is set, writes it there as ``gpu_check.json`` and ``gpu_check.md`` (rewritten after every
check, so a run cut short keeps its rows). Exit status 0 when no check failed.

Options (``GPU_CHECK_ARGS`` in make): ``--checks 1,2,3`` (a subset), ``--budget-s 540`` (checks whose time would
not fit are skipped, saying so), ``--full-bench`` (check 4 exactly as the issue lists it: 8 configurations, 5
repeats; ~10 minutes alone on an H100, run it as its own command), ``--cpu-dry-run`` (development only: the same
code paths on the CPU with the tiny pipeline in this interpreter; CUDA-only checks are marked SKIP).

This file is stdlib-only up to the hand-over to ``gpu_checks.main``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".gpu-venv"
WHEELS = ROOT / "gpu-wheels"

PROBE = ("import json, sys\ntry:\n    import torch\nexcept Exception as e:\n    print(json.dumps({'torch': None, 'error': "
         "str(e).splitlines()[0] if str(e) else type(e).__name__})); sys.exit()\nok = torch.cuda.is_available()\n"
         "print(json.dumps({'torch': torch.__version__, 'cuda': ok, 'cuda_version': torch.version.cuda, 'name': "
         "torch.cuda.get_device_name() if ok else None, 'python': sys.version.split()[0]}))")


def probe_cuda(python: str) -> dict:
    """``{"torch", "cuda", "cuda_version", "name", "python"}`` of ``python`` (torch None when it has none)."""
    try:
        r = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"torch": None, "error": str(e)}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"torch": None, "error": (r.stderr.strip().splitlines() or ["no output"])[-1]}


def no_cuda_line(info: dict, python: str) -> str:
    """The one line said where there is no CUDA GPU."""
    if info.get("torch") is None:
        why = f"{python} cannot import torch ({info.get('error')})"
    else:
        why = f"torch.cuda.is_available() is False (torch {info['torch']}, Python {info.get('python')})"
    return f"gpu-check: no CUDA GPU here: {why}; nothing was checked (run it on a GPU machine, see docs/device.md: GPU check)"


def _requirements(wheels: Path) -> list[str]:
    f = wheels / "requirements.txt"
    if not f.exists():
        return []
    return [ln.strip() for ln in f.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


PREINSTALLED = ("import json, re, sys\nfrom importlib import metadata\nout = {}\nfor r in sys.argv[1:]:\n"
                "    n = re.split(r'[<>=!~;\\[ ]', r, maxsplit=1)[0]\n    try:\n        out[n] = metadata.version(n)\n"
                "    except metadata.PackageNotFoundError:\n        pass\nprint(json.dumps(out))")


def setup_venv(python: str, wheels: Path = WHEELS, venv: Path = VENV) -> Path:
    """``venv`` with the machine's site-packages visible and everything else installed from ``wheels`` (no index);
    returns its python. Says which needed packages were preinstalled. Exits with one line when it cannot."""
    vpy = venv / "bin" / "python"
    stamp = venv / ".gpu-check-installed"
    if not vpy.exists():
        subprocess.run([python, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    _see_parent_sites(python, vpy)
    reqs = _requirements(wheels)
    names = ["torch", "numpy", "pandas", *reqs, "HolisticTraceAnalysis"]
    r = subprocess.run([str(vpy), "-c", PREINSTALLED, *names], capture_output=True, text=True)
    have = json.loads(r.stdout or "{}")
    print("gpu-check: preinstalled here: " + (", ".join(f"{n} {v}" for n, v in have.items()) or "nothing of the list"),
          flush=True)
    if stamp.exists() and stamp.read_text() == _wheels_id(wheels):
        return vpy
    if not reqs:
        sys.exit(f"gpu-check: {wheels}/requirements.txt is missing: run `make gpu-wheels` where the package registry "
                 "is reachable and carry gpu-wheels/ here")
    found = unpack(wheels, venv / "wheels")
    pip = [str(vpy), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-index", "--find-links", str(found)]
    steps = [pip + reqs]
    hta = sorted(found.glob("holistictraceanalysis-*.whl"))
    if hta:  # its declared jupyterlab/pytest are not used by the analysis
        steps.append(pip + ["--no-deps", str(hta[-1])])
    steps.append(pip + ["--no-deps", "-e", str(ROOT)])
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
            sys.exit(f"gpu-check: installing from {wheels} failed: {lines[-1] if lines else p.returncode} "
                     "(a package neither preinstalled nor in gpu-wheels: `make gpu-wheels` without GPU_WHEELS_SKIP)")
    stamp.write_text(_wheels_id(wheels))
    return vpy


SITES = ("import json, sys\nprint(json.dumps([p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))]))")


def _see_parent_sites(python: str, vpy: Path) -> None:
    """Make ``python``'s own site-packages visible in the venv of ``vpy`` with a ``.pth`` file.

    ``venv --system-site-packages`` shows the *base* installation's site-packages only: where ``python`` is itself
    a virtual environment (GPU images keep torch in one, e.g. ``/opt/torch/.venv``), its torch would be invisible.
    The .pth lines come after the venv's own site-packages on ``sys.path``, so what gpu-check installs wins."""
    r = subprocess.run([python, "-c", SITES], capture_output=True, text=True)
    own = subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True)
    if r.returncode or own.returncode:
        return
    target = Path(own.stdout.strip())
    paths = [p for p in json.loads(r.stdout) if Path(p) != target]
    (target / "_gpu_check_parent_sites.pth").write_text("".join(p + "\n" for p in paths))


def _wheels_id(wheels: Path) -> str:
    m = wheels / "MANIFEST.json"
    return m.read_text() if m.exists() else ""


def unpack(wheels: Path, dest: Path) -> Path:
    """The folder of wheels: ``wheels`` itself, or ``dest`` with ``wheels/wheels.tar.xz`` unpacked into it."""
    pack = wheels / "wheels.tar.xz"
    if not pack.exists():
        return wheels
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(pack, "r:xz") as t:
        t.extractall(dest, filter="data")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="development only: run the checks' code paths on the CPU (tiny pipeline, this interpreter)")
    ap.add_argument("--checks", default="1,2,3,4,5,6,mem", help="which checks (comma-separated: 1-6, mem)")
    ap.add_argument("--budget-s", type=float, default=None, help="time for all checks (default 540 on a GPU)")
    ap.add_argument("--full-bench", action="store_true", help="check 4 with the issue's whole matrix and 5 repeats")
    ap.add_argument("--hta-python", default=None, help="the interpreter that has HolisticTraceAnalysis (default: ours)")
    ap.add_argument("--no-venv", action="store_true", help="use this interpreter as it is (its torch and packages)")
    ap.add_argument("--workdir", default=None, help="where runs and traces go (default: a temporary folder)")
    args = ap.parse_args(argv)
    if not args.cpu_dry_run and not os.environ.get("GPU_CHECK_IN_VENV"):
        python = os.environ.get("GPU_PYTHON", sys.executable)
        info = probe_cuda(python)
        if not info.get("cuda"):
            print(no_cuda_line(info, python), flush=True)
            return 2
        print(f"gpu-check: {info['name']}, torch {info['torch']} (CUDA {info['cuda_version']}), Python {info['python']}",
              flush=True)
        if not args.no_venv:
            vpy = setup_venv(python)
            env = dict(os.environ, GPU_CHECK_IN_VENV="1")
            return subprocess.run([str(vpy), str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:])],
                                  env=env).returncode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpu_checks

    return gpu_checks.main(args)


if __name__ == "__main__":
    raise SystemExit(main())
