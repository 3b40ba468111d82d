"""Fixed start-up of the command line (issue 42): whole processes, best of ``--rounds``, against ``python -c pass``.

Each command is timed from ``subprocess.run`` to its exit (the interpreter's start, the imports, parsing the
options, the command's own work on an empty store), interleaved round by round so that the load of a shared
machine falls on all alike; the best of the rounds is what start-up costs when nothing else is in the way.
Printed per command: the best and the median in ms, the best as a ratio over ``python -c pass``, and whether
it is within the target (150 ms).

    python benchmarks/cli_startup.py --rounds 20
    python benchmarks/cli_startup.py --baseline /tmp/base/src   # the same commands with another checkout's src/
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_MS = 150.0


def commands(store: str) -> dict[str, list[str]]:
    """Label -> argv, the first being the floor (an interpreter that does nothing)."""
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        "stepscope --help": [py, "-m", "stepscope", "--help"],
        "stepscope runs --help": [py, "-m", "stepscope", "runs", "--help"],
        "stepscope runs (empty store)": [py, "-m", "stepscope", "runs", "--store", store],
        "stepscope explain --help": [py, "-m", "stepscope", "explain", "--help"],
        "stepscope device --help": [py, "-m", "stepscope", "device", "--help"],
    }


def time_once(argv: list[str], env: dict) -> float:
    """Seconds from start to exit of ``argv``; exits with its output when it fails."""
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10, help="interleaved runs of each command (the best is kept)")
    ap.add_argument("--baseline", help="another checkout's src/: its commands are timed too (label + ' [base]')")
    args = ap.parse_args()
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        sys.path.insert(0, here)
        from stepscope.store import Store

        Store(store, create=True).close()  # empty but valid: `runs` opens it, lists nothing
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
                   COLUMNS="120")
        env.pop("STEPSCOPE_STORE", None)
        configs = {k: (v, env) for k, v in commands(store).items()}
        if args.baseline:
            base = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [os.path.abspath(args.baseline),
                                                                       os.environ.get("PYTHONPATH")])))
            for k, v in list(configs.items())[1:]:
                configs[k + " [base]"] = (v[0], base)
        times: dict[str, list[float]] = {k: [] for k in configs}
        for k, (argv, e) in configs.items():  # one untimed run each: the first pays for cold caches and .pyc files
            time_once(argv, e)
        for _ in range(args.rounds):
            for k, (argv, e) in configs.items():
                times[k].append(time_once(argv, e))
    floor = min(times["python -c pass"])
    width = max(map(len, times)) + 2
    print(f"{'command':<{width}}{'best ms':>9}{'median ms':>11}{'x pass':>8}  target {TARGET_MS:g} ms")
    for k, ts in times.items():
        best = min(ts) * 1e3
        ok = "" if k == "python -c pass" else ("ok" if best <= TARGET_MS else "OVER")
        print(f"{k:<{width}}{best:>9.1f}{statistics.median(ts) * 1e3:>11.1f}{min(ts) / floor:>8.1f}  {ok}")
    print(f"target: every command's start-up <= {TARGET_MS:g} ms (best of {args.rounds}, whole process)")


if __name__ == "__main__":
    main()
