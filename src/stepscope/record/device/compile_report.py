"""torch.compile graph breaks and recompilations of a run: ``stepscope run --compile-report``.

Dynamo reports both through its artifact loggers (``graph_breaks``, ``recompiles``; the records that
``TORCH_LOGS=graph_breaks,recompiles`` prints). The recorder turns them on, keeps torch's console
handlers from printing them (the program's stderr stays as it was), parses each record, and writes
``<run dir>/compile_report.json``: ``{"graph_breaks": [...], "recompiles": [...]}``, each entry with the
user frame (``file``, ``line``), the ``reason`` and how many times it was seen.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from time import perf_counter_ns

_BREAK = re.compile(r"Graph break in user code at (?P<file>.+?):(?P<line>\d+)")
_REASON = re.compile(r"Graph Break Reason: (?P<reason>.+)")
_EXPLAIN = re.compile(r"Explanation: (?P<text>.+)")
_RECOMPILE = re.compile(r"Recompiling function (?P<function>\S+) in (?P<file>.+?):(?P<line>\d+)")
_GUARD = re.compile(r"triggered by the following guard failure\(s\):\s*(?P<guard>.+)", re.S)


def parse(message: str) -> dict | None:
    """One Dynamo log record -> ``{"kind", "file", "line", "reason", ...}``, or None if not a break/recompile."""
    m = _BREAK.search(message)
    if m:
        r = _REASON.search(message)
        e = _EXPLAIN.search(message)
        reason = r.group("reason").strip() if r else message.splitlines()[1].strip() if "\n" in message else ""
        if e and reason.startswith("Encountered graph break"):
            reason = e.group("text").strip()
        return {"kind": "graph_break", "file": m.group("file"), "line": int(m.group("line")), "reason": reason}
    m = _RECOMPILE.search(message)
    if m:
        g = _GUARD.search(message)
        guard = g.group("guard").strip().splitlines()[0].strip(" -") if g else ""
        return {"kind": "recompile", "file": m.group("file"), "line": int(m.group("line")),
                "function": m.group("function"), "reason": guard}
    return None


class CompileRecorder(logging.Handler):
    """Collects graph breaks and recompiles while attached to the ``torch`` logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            ev = parse(record.getMessage())
        except Exception:
            return
        if ev is not None:
            ev["t_ns"] = perf_counter_ns()
            self.events.append(ev)

    def start(self) -> None:
        import torch._logging

        torch._logging.set_logs(graph_breaks=True, recompiles=True)
        # torch gives its top loggers console handlers and stops propagation there: take their place
        self._attached = []
        for name in list(logging.Logger.manager.loggerDict):
            if name == "torch" or name.startswith("torch."):
                lg = logging.getLogger(name)
                consoles = [h for h in lg.handlers if isinstance(h, logging.StreamHandler)
                            and getattr(h, "stream", None) in (sys.stderr, sys.stdout)]
                for h in consoles:
                    lg.removeHandler(h)
                if consoles or name == "torch":
                    lg.addHandler(self)
                    self._attached.append(lg)

    def stop(self, path: str | Path) -> dict:
        """Detach and write the report; returns it."""
        for lg in getattr(self, "_attached", ()):
            lg.removeHandler(self)
        report = summarize(self.events)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=1))
        return report


def summarize(events: list[dict]) -> dict:
    """Group events by kind, user frame and reason: ``{"graph_breaks": [...], "recompiles": [...]}``
    (each entry with ``count``), most frequent first."""
    out: dict[str, dict] = {"graph_break": {}, "recompile": {}}
    for ev in events:
        key = (ev["file"], ev["line"], ev["reason"])
        d = out[ev["kind"]].get(key)
        if d is None:
            d = out[ev["kind"]][key] = {k: v for k, v in ev.items() if k not in ("kind", "t_ns")} | {"count": 0}
        d["count"] += 1
    order = lambda items: sorted(items, key=lambda d: (-d["count"], d["file"], d["line"]))  # noqa: E731
    return {"graph_breaks": order(out["graph_break"].values()), "recompiles": order(out["recompile"].values())}
