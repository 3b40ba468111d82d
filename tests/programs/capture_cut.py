"""An idle service for capture tests: ``python capture_cut.py DIR``. Polls DIR every 10 ms; once DIR/trigger
exists it calls ``long_call()`` once, which writes DIR/started and runs until DIR/release exists; it ends when
DIR/stop exists (each wait bounded: 300 s)."""
import os
import sys
import time

d = sys.argv[1]


def long_call():
    open(os.path.join(d, "started"), "w").close()
    end = time.monotonic() + 300
    while not os.path.exists(os.path.join(d, "release")) and time.monotonic() < end:
        time.sleep(0.01)


print("up", flush=True)
done = False
end = time.monotonic() + 300
while not os.path.exists(os.path.join(d, "stop")) and time.monotonic() < end:
    if not done and os.path.exists(os.path.join(d, "trigger")):
        long_call()
        done = True
    time.sleep(0.01)
print("done", flush=True)
