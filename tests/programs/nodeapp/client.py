"""Drive the app: ``python client.py PORTFILE N [--gap S] [--steps K]``: wait for the port, send N requests one
after another with S seconds of idle between them, then POST /shutdown. Prints each answer."""
import argparse
import json
import os
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("portfile")
ap.add_argument("n", type=int)
ap.add_argument("--gap", type=float, default=0.5)
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--timeout", type=float, default=120)
a = ap.parse_args()
end = time.monotonic() + a.timeout
while not os.path.exists(a.portfile):
    if time.monotonic() > end:
        raise SystemExit(f"no port file {a.portfile} after {a.timeout} s")
    time.sleep(0.05)
base = f"http://127.0.0.1:{open(a.portfile).read().strip()}"
for i in range(a.n):
    if i:
        time.sleep(a.gap)  # the app idles between requests (part of the program under test)
    req = urllib.request.Request(base + "/api/v1/queue/enqueue", data=json.dumps({"prompt": "a cat", "steps": a.steps, "seed": i}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    print(urllib.request.urlopen(req, timeout=a.timeout).read().decode(), flush=True)
urllib.request.urlopen(urllib.request.Request(base + "/shutdown", data=b"", method="POST"), timeout=30).read()
