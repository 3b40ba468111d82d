"""Runs traced calls, sleeps 0.3 s (sampled time: ~30 samples at 101 Hz), prints 'ready', then sleeps until
killed."""
import sys
import time

from sstargets import funcs

for i in range(5):
    funcs.add(i)
time.sleep(0.3)
print("ready", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 60)
