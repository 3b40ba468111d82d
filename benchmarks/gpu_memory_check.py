"""CUDA checks of the memory lane (issue 19), for `make gpu-check`: stepscope on a small CUDA program, and the
stored figures checked against what the program did. On a machine without CUDA ``run_checks`` returns [].

What is checked (each a ``{"check": name, "figure": text, "ok": bool}``):

- ``cuda lane``: the lane holds CUDA allocated/reserved bytes once the program initialised CUDA;
- ``cuda span growth``: a traced function that allocates 512 MiB on the device and holds it 0.5 s shows a
  growth within 10% of 512 MiB (CUDA allocated bytes, sampled);
- ``cuda peak``: the run's CUDA peak (``max_memory_allocated``) is at least 512 MiB;
- ``oom status``: a ``torch.OutOfMemoryError`` raised by the allocator inside a traced span: run status "oom",
  the span named, CUDA memory at the time recorded;
- ``memory history``: with ``--memory-history`` the allocator snapshot was written and its largest live block
  (the 512 MiB kept alive) is attributed to the program's line that allocated it.

    python benchmarks/gpu_memory_check.py [WORKDIR]
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

PROGRAM = '''\
import sys
import time

import torch

MiB = 1 << 20


def alloc(n_mib):
    x = torch.empty(n_mib * MiB, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    time.sleep(0.5)
    return x


def too_much():
    free, total = torch.cuda.mem_get_info()
    return torch.empty(2 * total, dtype=torch.uint8, device="cuda")


torch.empty(1, device="cuda")
time.sleep(0.3)
keep = alloc(512)
time.sleep(0.3)
if "oom" in sys.argv:
    too_much()
'''


def _cuda(python: str) -> bool:
    r = subprocess.run([python, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == "True"


def _run(python: str, workdir: pathlib.Path, store: pathlib.Path, *extra: str) -> tuple[int, dict | None, str]:
    cmd = [python, "-m", "stepscope", "run", "--json", "--store", str(store), "--trace", "__main__.alloc", "--trace",
           "__main__.too_much", *[e for e in extra if e.startswith("--")], "--", python, str(workdir / "cuda_memory.py"),
           *[e for e in extra if not e.startswith("--")]]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, timeout=600)
    doc = None
    for line in reversed(r.stdout.strip().splitlines()):
        try:
            doc = json.loads(line)
            break
        except ValueError:
            continue
    return r.returncode, doc, r.stderr[-1500:]


def run_checks(workdir: pathlib.Path, python: str) -> list[dict]:
    """Run the CUDA memory checks with ``python`` (an interpreter with torch and stepscope) in ``workdir``;
    [] without CUDA."""
    if not _cuda(python):
        return []
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "cuda_memory.py").write_text(PROGRAM)
    out: list[dict] = []
    MiB = 1 << 20

    def check(name: str, ok: bool, figure: str) -> None:
        out.append({"check": name, "figure": figure, "ok": bool(ok)})

    rc, doc, err = _run(python, workdir, workdir / "store")
    mem = (doc or {}).get("run", {}).get("memory") or {}
    if rc != 0 or not mem:
        check("cuda lane", False, f"run failed (exit {rc}): {err.strip().splitlines()[-1:] }")
        return out
    check("cuda lane", mem.get("peak_cuda") is not None and mem.get("samples", 0) > 0,
          f"{mem.get('samples')} samples, CUDA peak allocated {mem.get('peak_cuda')} B, reserved {mem.get('peak_reserved')} B")
    span = next((s for s in mem.get("spans", []) if s["name"] == "__main__.alloc"), None)
    g = span and span.get("growth")
    check("cuda span growth", g is not None and abs(g - 512 * MiB) <= 0.1 * 512 * MiB,
          f"__main__.alloc grew {None if g is None else round(g / MiB, 1)} MiB (512 MiB allocated)")
    check("cuda peak", (mem.get("peak_cuda") or 0) >= 512 * MiB, f"peak {round((mem.get('peak_cuda') or 0) / MiB, 1)} MiB")

    rc, doc, err = _run(python, workdir, workdir / "store_oom", "oom", "--memory-history")
    run = (doc or {}).get("run") or {}
    oom = (run.get("memory") or {}).get("oom") or {}
    check("oom status", run.get("status") == "oom" and oom.get("span") == "__main__.too_much"
          and (oom.get("memory") or {}).get("cuda_allocated") is not None,
          f"status {run.get('status')}, span {oom.get('span')}, error {oom.get('error')}, memory {oom.get('memory')}")
    snap = oom.get("snapshot") or {}
    top = (snap.get("largest") or [{}])[0]
    check("memory history", top.get("size", 0) >= 512 * MiB and "cuda_memory.py" in (top.get("where") or ""),
          f"largest live block {top.get('size')} B at {top.get('where')}; {snap.get('active_blocks')} live blocks")
    return out


if __name__ == "__main__":
    wd = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(tempfile.mkdtemp(prefix="stepscope-gpu-mem-"))
    results = run_checks(wd, sys.executable)
    if not results:
        print("no CUDA: nothing to check")
    for r in results:
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['check']}: {r['figure']}")
    sys.exit(0 if all(r["ok"] for r in results) else 1)
