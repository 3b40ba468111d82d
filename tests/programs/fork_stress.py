"""Forks hundreds of times while a traced function runs in a busy thread (the recorder flushing all along).

Each forked child blocks in a read until its parent ends it with SIGTERM; it must die by that signal at
once, as the child of an unprofiled program does (no inherited handler, lock or thread of the profiler's).
Then fork-context pools, after a spawn pool, each closed by ``terminate()`` (``with``). Prints the number of
calls of ``tick`` made, which the run must hold as spans. Exit 1 on a child that does not end in time."""
import multiprocessing as mp
import os
import signal
import sys
import threading
import time

FORKS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
POOLS = int(sys.argv[2]) if len(sys.argv) > 2 else 10


def tick(i):
    return i + 1


def square(x):
    return x * x


def busy(stop, count):
    n = 0
    while not stop.is_set():  # holds the GIL most of the time: the forking thread waits for it at each fork
        tick(n)
        n += 1
        x = 0
        for _ in range(2000):
            x += 1
    count.append(n)


def wait_child(pid, deadline_s=20.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return status
        time.sleep(0.001)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def main():
    stop = threading.Event()
    count = []
    th = threading.Thread(target=busy, args=(stop, count))
    th.start()
    for i in range(FORKS):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)  # blocks: only the parent's SIGTERM ends it
            os._exit(3)
        os.close(r)
        os.kill(pid, signal.SIGTERM)
        status = wait_child(pid)
        os.close(w)
        if status is None or not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGTERM:
            print(f"fork {i}: child did not end by SIGTERM: {status}", flush=True)
            stop.set()
            th.join()
            sys.exit(1)
    with mp.get_context("spawn").Pool(2) as p:
        spawned = p.map(square, range(5))
    for i in range(POOLS):
        with mp.get_context("fork").Pool(2) as p:
            forked = p.map(square, range(5))
    stop.set()
    th.join()
    print("forks", FORKS, "pools", POOLS, spawned, forked)
    print("ticks", count[0])


if __name__ == "__main__":
    main()
