"""The session queue: one worker thread takes graphs off a queue and runs them node by node."""
from __future__ import annotations

import queue
import threading

from ..invocations.baseinvocation import REGISTRY


class Context:
    def __init__(self, model):
        self.model = model
        self.outputs: dict = {}
        self.started: list = []


class SessionQueue:
    def __init__(self, model):
        self.model = model
        self.q: queue.Queue = queue.Queue()
        self.worker = threading.Thread(target=self._run, name="session-queue", daemon=True)
        self.worker.start()

    def enqueue(self, graph: list[dict]) -> "queue.Queue":
        done: queue.Queue = queue.Queue(maxsize=1)
        self.q.put((graph, done))
        return done

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            graph, done = item
            try:
                done.put(("ok", self.run_graph(graph)))
            except Exception as e:  # the app reports a failed session, and goes on
                done.put(("error", repr(e)))

    def run_graph(self, graph: list[dict]) -> dict:
        ctx = Context(self.model)
        for node in graph:
            fields = {k: v for k, v in node.items() if k != "type"}
            ctx.outputs.update(REGISTRY[node["type"]](**fields).invoke_internal(ctx))
        image = ctx.outputs["image"]
        return {"nodes": ctx.started, "shape": list(image.shape), "mean": round(float(image.mean()), 4)}

    def stop(self) -> None:
        self.q.put(None)
        self.worker.join()
