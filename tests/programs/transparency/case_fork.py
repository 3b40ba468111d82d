"""A forking program: the child sees what the child of an unprofiled program sees (signal dispositions, one
thread), and the parent gets no warning about forking a multi-threaded process (3.12+)."""
import multiprocessing as mp
import os
import signal
import threading

NAMES = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGALRM", "SIGPROF")


def dispositions():
    out = {}
    for name in NAMES:
        h = signal.getsignal(getattr(signal, name))
        out[name] = h if isinstance(h, int) else getattr(h, "__name__", type(h).__name__)
    for k in range(1, 9):
        h = signal.getsignal(signal.SIGRTMAX - k)
        out[f"RTMAX-{k}"] = h if isinstance(h, int) else getattr(h, "__name__", type(h).__name__)
    return out


def os_threads():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[17])


def work(x):
    return x * 3


def report(tag):
    return f"{tag}: {sorted(dispositions().items())} threads={threading.active_count()}/{os_threads()}"


def main():
    print(work(1))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, report("child").encode())
        os._exit(5)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    print(data.decode(), "exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
    with mp.get_context("fork").Pool(2) as p:
        print(p.map(report, ["pool worker"] * 2))
    print(work(2))


if __name__ == "__main__":
    main()
