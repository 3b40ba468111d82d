"""Handles the signals named in argv (each delivery prints 'got NAME'), makes 5 traced calls, prints
'ready', then waits; 1 s after the first handled signal (time for a second copy to show) it exits 3."""
import os
import signal
import sys
import time

from sstargets import funcs

got = []


def on(sig, frame):
    print("got", signal.Signals(sig).name, flush=True)
    got.append(time.monotonic())


for name in sys.argv[1:]:
    signal.signal(getattr(signal, name), on)
for i in range(5):
    funcs.add(i)
print("ready", os.getpid(), flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    if got and time.monotonic() - got[0] > 1.0:
        sys.exit(3)
    time.sleep(0.02)
