"""Runs traced calls, then sleeps until killed."""
import sys
import time

from sstargets import funcs

for i in range(5):
    funcs.add(i)
print("ready", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 60)
