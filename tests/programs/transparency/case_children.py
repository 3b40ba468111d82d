"""A program that starts other Python processes: os.fork, a fork pool, a spawn pool, subprocess of python -c and
of a script, one that exits with a code and one that dies by a signal. Everything it prints must be the same
under stepscope, and the traced names must be recorded in the children (process runs of the run)."""
import multiprocessing as mp
import os
import signal
import subprocess
import sys

import tpmod


def work(x):
    return tpmod.handle(x) * 3


def main():
    print(work(1), flush=True)
    pid = os.fork()
    if pid == 0:
        print("forked child", work(2), flush=True)
        os._exit(5)
    print("fork exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
    with mp.get_context("fork").Pool(2) as p:
        print("fork pool", p.map(work, range(4)), flush=True)
    with mp.get_context("spawn").Pool(2) as p:
        print("spawn pool", p.map(work, range(4)), flush=True)
    code = "import sys, tpmod; print('child -c', tpmod.handle(41), sys.argv[1:], flush=True); sys.exit(7)"
    r = subprocess.run([sys.executable, "-c", code, "a", "b"])
    print("subprocess exit", r.returncode, flush=True)
    r = subprocess.run([sys.executable, "-u", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    print("killed by", r.returncode, flush=True)
    r = subprocess.run([sys.executable, "-c", "import sys; print(sys.flags.unbuffered, sys.argv)", "-x"],
                       capture_output=True, text=True)
    print("captured", r.stdout.strip(), repr(r.stderr), flush=True)
    print(work(2))


if __name__ == "__main__":
    main()
