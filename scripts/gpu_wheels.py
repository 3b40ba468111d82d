"""Download, here (with the package registry), the wheels that `make gpu-check` installs on a GPU machine that
reaches no registry: ``make gpu-wheels`` (``python scripts/gpu_wheels.py [--dest gpu-wheels] [--skip numpy,...]``).

What: stepscope's runtime dependencies (``pyproject.toml``: ``dependencies`` and the ``sd`` extra: diffusers,
transformers, accelerate and theirs), Holistic Trace Analysis (``HolisticTraceAnalysis``, installed with
``--no-deps``: its declared jupyterlab/pytest are not imported by the analysis; pandas, plotly and pyyaml are)
and setuptools/wheel (to install stepscope itself with no index). Never torch, triton, the nvidia-*/cuda-*
wheels nor torch's own dependencies that a torch install always has (sympy, networkx, mpmath): the GPU machine has
torch with CUDA. For CPython 3.12, manylinux x86_64 (``pip download --python-version 3.12 --only-binary=:all:
--platform manylinux...``). Versions are pinned to those installed in the interpreter that runs this script (the
tested set, ``.venv``) where it has them.

The folder travels with the working tree to the GPU machine, whose carry limit is 64 MiB in all: this prints the
folder's size and, over ``--budget-mib``, which wheels are largest and how to leave out packages the GPU image
already has (``--skip numpy,pandas``; `make gpu-check` prints which it found preinstalled, and pip uses those).

Writes ``<dest>/requirements.txt`` (what gpu-check installs, with pyproject's specifiers, so that a preinstalled
version that satisfies them is kept) and ``<dest>/MANIFEST.json`` (files, sizes, skipped packages).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "manylinux_2_5_x86_64",
             "manylinux_2_12_x86_64")
#: installed on the GPU machine with its torch: never downloaded (torch's own dependencies included)
NEVER = re.compile(r"^(torch|torchvision|torchaudio|triton|pytorch-triton|nvidia-.*|cuda-.*|sympy|mpmath|networkx)$")
#: Holistic Trace Analysis: the package (no deps) and what its idle time breakdown imports
HTA = "HolisticTraceAnalysis"
HTA_RUNTIME = ["pandas", "plotly", "pyyaml", "psutil"]  # and networkx, which torch brings
BUILD = ["setuptools>=68", "wheel"]


def norm(name: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_requirements() -> list[str]:
    """pyproject's dependencies and the ``sd`` extra (their specifiers)."""
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    proj = doc["project"]
    return list(proj["dependencies"]) + list(proj["optional-dependencies"]["sd"])


def installed_pins() -> dict[str, str]:
    """name -> version of what this interpreter has (the tested set)."""
    return {norm(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


def pip_download(dest: Path, reqs: list[str], constraints: Path | None, deps: bool) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--dest", str(dest),
           "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none",
           "--only-binary=:all:"]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    if not deps:
        cmd.append("--no-deps")
    if constraints is not None:
        cmd += ["-c", str(constraints)]
    r = subprocess.run(cmd + reqs, capture_output=True, text=True)
    if r.returncode:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "is ignored" not in ln]
        sys.exit(f"gpu-wheels: pip download failed: {lines[-1] if lines else r.returncode}")


def wheel_name(path: Path) -> str:
    return norm(path.name.split("-", 1)[0])


def pack(dest: Path, wheels: list[str]) -> Path:
    """Replace the wheels in ``dest`` by ``wheels.tar.xz``: each wheel rewritten with its members stored (not
    deflated; a wheel's RECORD hashes its files, not the archive, so it stays the same valid wheel), then all of
    them in one tar compressed by xz -9 as one stream, which finds what the separately deflated members share:
    ~100 MiB of wheels become ~55 MiB. ``make gpu-check`` unpacks it before installing."""
    import tarfile
    import zipfile

    tar = dest / "wheels.tar"
    with tarfile.open(tar, "w") as t:
        for name in wheels:
            w = dest / name
            stored = dest / f".{name}"
            with zipfile.ZipFile(w) as zi, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as zo:
                for info in zi.infolist():
                    zo.writestr(info, zi.read(info), compress_type=zipfile.ZIP_STORED)
            t.add(stored, arcname=name)
            stored.unlink()
            w.unlink()
    if shutil.which("xz"):
        subprocess.run(["xz", "-9", "-T2", "-f", str(tar)], check=True)
    else:
        import lzma

        with open(tar, "rb") as src, lzma.open(f"{tar}.xz", "wb", preset=9) as out:
            shutil.copyfileobj(src, out, 1 << 20)
        tar.unlink()
    return dest / "wheels.tar.xz"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=str(ROOT / "gpu-wheels"))
    ap.add_argument("--skip", default="", help="comma-separated packages the GPU machine already has (not downloaded)")
    ap.add_argument("--budget-mib", type=float, default=60.0, help="warn above this size (the carry limit is 64 MiB "
                    "with the working tree)")
    ap.add_argument("--no-pack", action="store_true", help="keep the .whl files as they are (no wheels.tar.xz)")
    args = ap.parse_args(argv)
    dest = Path(args.dest)
    skip = {norm(s) for s in args.skip.split(",") if s.strip()}
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    pins = installed_pins()
    torch_pin = pins.pop("torch", None)
    cons = dest / ".constraints.txt"
    cons.write_text("".join(f"{n}=={v.split('+')[0]}\n" for n, v in sorted(pins.items())
                            if n != "stepscope" and not NEVER.match(n)))
    reqs = runtime_requirements()
    # accelerate requires torch: its own dependencies are listed instead, and it comes without them
    no_deps = [r for r in reqs if norm(re.split(r"[<>=!~;\[ ]", r, 1)[0]) == "accelerate"]
    with_deps = [r for r in reqs if r not in no_deps] + ["psutil", "pyyaml", "safetensors", "huggingface_hub",
                                                          "packaging", "numpy"] + HTA_RUNTIME
    tmp = dest / ".all"
    tmp.mkdir()
    pip_download(tmp, with_deps + BUILD, cons, deps=True)
    pip_download(tmp, no_deps + [HTA], cons, deps=False)
    kept, dropped = [], []
    for w in sorted(tmp.glob("*.whl")):
        n = wheel_name(w)
        if NEVER.match(n) or n in skip:
            dropped.append(w.name)
            w.unlink()
            continue
        w.rename(dest / w.name)
        kept.append(w.name)
    tmp.rmdir()
    cons.unlink()
    top = [r for r in reqs] + HTA_RUNTIME
    (dest / "requirements.txt").write_text(
        "# what `make gpu-check` installs from this folder (pip keeps a preinstalled version that satisfies these)\n"
        + "".join(f"{r}\n" for r in top if norm(re.split(r"[<>=!~;\[ ]", r, 1)[0]) not in skip))
    sizes = {w: (dest / w).stat().st_size for w in kept}
    if not args.no_pack:
        pack(dest, kept)
    total = sum(f.stat().st_size for f in dest.iterdir() if f.suffix in (".whl", ".xz"))
    manifest = {"python": "3.12", "platform": "manylinux x86_64", "wheels": sizes, "total_bytes": total,
                "skipped": sorted(skip), "left_out": dropped, "hta": HTA, "built_with_torch": torch_pin}
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    mib = total / 2**20
    print(f"gpu-wheels: {len(kept)} wheels ({sum(sizes.values()) / 2**20:.1f} MiB as wheels), {mib:.1f} MiB in {dest}"
          + ("" if args.no_pack else " as wheels.tar.xz")
          + (f" (left out: {', '.join(sorted(skip))})" if skip else ""))
    if dropped:
        print(f"gpu-wheels: not kept (the GPU machine's torch brings them, or --skip): {', '.join(dropped)}")
    if mib > args.budget_mib:
        big = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
        print(f"gpu-wheels: over {args.budget_mib:g} MiB: the carry to the GPU machine is 64 MiB with the working tree. "
              f"Largest: {', '.join(f'{w.split(chr(45))[0]} {s / 2**20:.1f} MiB' for w, s in big)}. Leave out what the "
              "GPU image has: `make gpu-wheels GPU_WHEELS_SKIP=numpy,pandas`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
