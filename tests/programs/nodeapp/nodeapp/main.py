"""Start the app: ``python -m nodeapp.main PORTFILE [--threads N]``. Builds the model, starts the session
queue and idle background threads (blocked in C waits, as a real app's are), then serves on 127.0.0.1 (a
free port, written to PORTFILE) until ``POST /shutdown``."""
from __future__ import annotations

import _queue
import argparse
import asyncio
import socket
import threading

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from . import invocations  # noqa: F401  (registers the nodes)
from .services.session_queue import SessionQueue


def build_model():
    from stepscope.pipelines.sd import build_pipeline  # test-sized diffusers components, built offline

    return build_pipeline("tiny")


def idle_threads(n: int) -> list:
    """``n`` background threads that wait in C for work that never comes (a model-cache janitor, a metrics
    pusher, a file watcher...)."""
    out = []
    for i in range(n):
        if i % 2 == 0:
            q = _queue.SimpleQueue()
            target, args = q.get, ()
        else:
            ev = threading.Event()
            target, args = ev.wait, ()
        th = threading.Thread(target=target, args=args, name=f"idle-{i}", daemon=True)
        th.start()
        out.append(th)
    return out


def graph(body: dict) -> list[dict]:
    return [{"type": "noise", "seed": body.get("seed", 0), "size": body.get("size", 64)},
            {"type": "compel", "prompt": body.get("prompt", "a cat")},
            {"type": "denoise_latents", "steps": body.get("steps", 4), "cfg": body.get("cfg", 7.5)},
            {"type": "l2i"}]


def make_app(sessions: SessionQueue, server_box: list) -> Starlette:
    async def enqueue(request):
        body = await request.json()
        done = sessions.enqueue(graph(body))
        status, result = await asyncio.get_running_loop().run_in_executor(None, done.get)
        return JSONResponse({"status": status, "result": result})

    async def health(request):
        return JSONResponse({"ok": True})

    async def shutdown(request):
        server_box[0].should_exit = True
        return JSONResponse({"bye": True})

    return Starlette(routes=[Route("/api/v1/queue/enqueue", enqueue, methods=["POST"]),
                             Route("/health", health), Route("/shutdown", shutdown, methods=["POST"])])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("portfile")
    ap.add_argument("--threads", type=int, default=6, help="idle background threads")
    args = ap.parse_args()
    model = build_model()
    sessions = SessionQueue(model)
    idle_threads(args.threads)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port is published: a client that connects before uvicorn serves waits in the backlog
    box: list = []
    config = uvicorn.Config(make_app(sessions, box), loop="asyncio", http="h11", log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    box.append(server)
    with open(args.portfile + ".tmp", "w") as f:
        f.write(str(sock.getsockname()[1]))
    import os

    os.replace(args.portfile + ".tmp", args.portfile)
    server.run(sockets=[sock])
    sessions.stop()
    print("served", flush=True)


if __name__ == "__main__":
    main()
