"""A small job for the exports: work() calls leaf() 5 times (each spins ~3 ms) and boom(), which raises a ValueError
that work() catches; `child` runs this same program again as a second process (subprocess.run), `exit N` ends with
code N after printing."""
import subprocess
import sys
import time


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def leaf(i):
    spin(0.003)
    return i


def boom():
    raise ValueError("bad input")


def work(n):
    for i in range(n):
        leaf(i)
    try:
        boom()
    except ValueError:
        pass


if __name__ == "__main__":
    args = sys.argv[1:]
    work(5)
    print("job done", flush=True)
    print("job stderr", file=sys.stderr, flush=True)
    if "child" in args:
        subprocess.run([sys.executable, __file__], check=True)
    if "exit" in args:
        sys.exit(int(args[args.index("exit") + 1]))
