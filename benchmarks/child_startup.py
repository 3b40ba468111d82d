"""Start-up cost of a child process under stepscope (issue 29): how much longer a Python process the program starts
takes to start, run a trivial body and end when stepscope follows it (a new interpreter: the sitecustomize's exec of
the launcher and a process run; a forked child: a new session after the fork hook) than with ``--no-children``.

The parent program times, inside itself, N children one after the other (``subprocess.run([python, -c, ...])`` and
``os.fork`` + ``waitpid``) and prints the median wall time of each kind; the same program runs under
``stepscope run`` (children followed) and ``stepscope run --no-children``, interleaved; printed: the medians, the extra
ms per child and the ratio.

    python benchmarks/child_startup.py --rounds 3 --children 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PARENT = r'''
import json, os, statistics, subprocess, sys, time
n = int(sys.argv[1])
def spawn():
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "x = sum(range(1000))"], check=True)
    return time.perf_counter() - t
def fork():
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        x = sum(range(1000))
        sys.exit(0)
    os.waitpid(pid, 0)
    return time.perf_counter() - t
out = {"exec": statistics.median(spawn() for _ in range(n)), "fork": statistics.median(fork() for _ in range(n))}
print(json.dumps(out))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the two configurations")
    ap.add_argument("--children", type=int, default=20, help="children of each kind per run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "parent.py")
        with open(prog, "w") as f:
            f.write(PARENT)
        env = dict(os.environ, STEPSCOPE_STORE=os.path.join(tmp, "store"))
        configs = {"plain": [sys.executable, prog],
                   "--no-children": [sys.executable, "-m", "stepscope", "run", "-q", "--no-children", "--", sys.executable, prog],
                   "children": [sys.executable, "-m", "stepscope", "run", "-q", "--", sys.executable, prog]}
        res: dict[str, list[dict]] = {k: [] for k in configs}
        for _ in range(args.rounds):
            for name, cmd in configs.items():
                r = subprocess.run([*cmd, str(args.children)], env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"{name} failed: {r.stderr[-2000:]}")
                res[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"median wall time of one child (start, trivial body, end), {args.children} children x {args.rounds} rounds")
    print(f"{'config':<15} {'exec (ms)':>10} {'fork (ms)':>10}")
    med = {k: {kind: statistics.median(x[kind] for x in v) * 1e3 for kind in ("exec", "fork")} for k, v in res.items()}
    for k, m in med.items():
        print(f"{k:<15} {m['exec']:>10.1f} {m['fork']:>10.1f}")
    base = med["--no-children"]
    for kind in ("exec", "fork"):
        extra = med["children"][kind] - base[kind]
        print(f"{kind}: followed child +{extra:.1f} ms ({med['children'][kind] / base[kind]:.2f}x the --no-children child)")


if __name__ == "__main__":
    main()
