"""The main thread waits (an Event, a select), spins, waits again: `spin` is 0.6 s of CPU between 2 s waits (0.6 s of
the thread's own CPU time, whatever else the machine runs). A second thread waits all along. Prints nothing."""
import selectors
import socket
import threading
import time


def spin(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


def wait_select(seconds):
    sel = selectors.DefaultSelector()
    a, b = socket.socketpair()
    sel.register(a, selectors.EVENT_READ)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sel.select(end - time.perf_counter())
    sel.close()
    a.close()
    b.close()


def main():
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    threading.Event().wait(2.0)
    spin(0.6)
    wait_select(2.0)
    spin(0.6)
    time.sleep(0.5)


main()
