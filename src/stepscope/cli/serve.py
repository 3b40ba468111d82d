"""``stepscope serve``: the local web UI over the store, and the endpoint the Sentry SDK sends to."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import Optional

import click

from ..core import limits
from .common import StoreOpt, UserError, command, err, handles_errors, open_store

_MB = 1024 * 1024


@command("serve")
@click.option("--host", default="127.0.0.1", help="Address to bind (default: loopback only).")
@click.option("--port", type=int, default=8969, help="Port, 1-65535 (8969: the Sentry Spotlight sidecar's).")
@StoreOpt
@click.option("--open", "open_mode", is_flag=True, default=False, help="Development only: accept envelopes without a "
              "key.")
@click.option("--max-body-mb", type=float, default=20, help="Largest request body, as sent (MiB, up to 4096).")
@click.option("--max-decoded-mb", type=float, default=100, help="Largest body after decompression (MiB, up to 16384).")
@handles_errors
def serve(host: str, port: int, store: Optional[Path], open_mode: bool, max_body_mb: float,
          max_decoded_mb: float) -> None:
    """Serve the web UI (transactions, waterfall, flame graphs, explain, device, benchmarks) and take the
    Sentry SDK's envelopes at /api/<project>/envelope/ and /stream (Spotlight)."""
    limits.in_range("--port", port, 1, 65535, integer=True)
    limits.in_range("--max-body-mb", max_body_mb, 0.001, 4096)
    limits.in_range("--max-decoded-mb", max_decoded_mb, 0.001, 16384)
    import uvicorn

    from ..serve.web import ServerConfig, create_app
    from ..serve.web.headlimits import protocol
    from ..serve.web.net import is_loopback
    from ..store import keys as keystore

    try:  # uvicorn's HTTP/1.1 parser (STEPSCOPE_HTTP=h11 for the pure-Python one), with the request head bounded
        http = protocol(os.environ.get("STEPSCOPE_HTTP", "auto"))
    except ValueError as e:
        raise UserError(str(e)) from None

    sock = _listen(host, port)  # before anything is printed: a port in use is a one-line error
    st = open_store(store, create=True)
    keys = keystore.list_keys(st)
    if not keys and not open_mode:
        keys = [keystore.add(st, "1", "made by the first `stepscope serve`")]
        err.print("made a key for project 1 (see `stepscope keys list`)")
    path = st.path
    st.close()
    if not is_loopback(host):
        err.print(f"[bold yellow]warning:[/] serving on {host}: anyone who can reach this machine on port {port} can "
                  "read every run in the store" + (" and, with --open, write to it" if open_mode else ""))
    shown = host if is_loopback(host) or host not in ("0.0.0.0", "::") else "127.0.0.1"
    err.print(f"stepscope serve: http://{shown}:{port}/  (store {path})")
    if open_mode:
        err.print("[bold yellow]open mode:[/] envelopes are accepted without a key")
    for k in keys:
        err.print(f"  DSN for project {k.project_id}: {k.dsn(shown, port)}")
    err.print(f"  Spotlight: sentry_sdk.init(spotlight=\"http://{shown}:{port}/stream"
              + (f"?sentry_key={keys[0].public_key}" if keys and not open_mode else "") + "\")")
    app = create_app(ServerConfig(store=path, open_mode=open_mode, max_body_bytes=int(max_body_mb * _MB),
                                  max_decoded_bytes=int(max_decoded_mb * _MB), host=host))
    # (no proxy headers: the server is for this machine; uvicorn's middleware for them costs every request)
    server = uvicorn.Server(uvicorn.Config(app, http=http, log_level="warning", access_log=False, server_header=False,
                                           proxy_headers=False))
    from ..serve.ingest.writer import quiet_gc

    quiet_gc()  # (each envelope's records are short-lived: see there)
    server.run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port). Raises UserError naming the address when it cannot be had."""
    try:
        family, kind, proto = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][:3]
        sock = socket.socket(family, kind, proto)  # proto TCP: asyncio then sets TCP_NODELAY on each connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as e:
        hint = " (another server is there: --port picks another)" if e.errno == errno.EADDRINUSE else ""
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}{hint}") from None
    sock.set_inheritable(True)
    return sock
