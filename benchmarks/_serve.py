"""For the serve benchmarks: a real `stepscope serve` on a free port over a store, with a key."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from stepscope.store import keys as keystore
from stepscope.store.db import Store


def wait_for_port(port: int, seconds: float = 30.0) -> None:
    """Until something accepts connections on 127.0.0.1:``port`` (or ``seconds`` pass)."""
    for _ in range(int(seconds * 10)):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)


@contextlib.contextmanager
def serving(store: Path):
    """Yields (port, key) while the server runs; stops it after."""
    key = keystore.add(Store(store), "1").public_key
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([sys.executable, "-m", "stepscope", "serve", "--port", str(port)],
                           env={**os.environ, "STEPSCOPE_STORE": str(store)}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield port, key
    finally:
        srv.terminate()
        srv.wait(20)
