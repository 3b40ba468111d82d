"""Which ``stepscope try`` fixes apply to what a run recorded, with the command line that measures them.

Read from the run (no torch): the pipeline and denoiser facts ``record.steps.workfacts`` noted (``env["work"]``:
attention processor classes, each component's device, dtype and offload hook), the sync sites it traced (spans
of op ``sync``: ``stepscope run --syncs`` or ``--device-trace``) and Dynamo's counters (``env["compile"]``).

- classic attention processors (``AttnProcessor``...) -> ``sdpa``;
- a denoiser in float32 on a GPU -> ``fp16``, ``bf16``;
- a host sync called from a scheduler's code -> ``sync-free-scheduler``;
- a component with accelerate's offload hook -> ``no-offload`` (what the offload costs);
- a compiled denoiser with graph breaks or more frames compiled than pipelines (recompiles) -> ``compile``
  measured alone (compile time apart); a GPU run without torch.compile -> ``compile``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..core.model import RunData
from ..core.spantable import as_table

_CLASSIC = ("AttnProcessor", "AttnAddedKVProcessor", "SlicedAttnProcessor", "XFormersAttnProcessor")


@dataclass(slots=True)
class FixHint:
    """A fix that applies (``fix``: a ``fixes.FIXES`` name) and what in the run says so (``why``)."""

    fix: str
    why: str


def _denoisers(work: dict) -> list[dict]:
    out = []
    pipe = work.get("pipeline") or {}
    if pipe.get("denoiser"):
        out.append(pipe["denoiser"])
    out.extend(work.get("denoisers") or [])
    return out


def fix_hints(data: RunData) -> list[FixHint]:
    """The fixes that apply to ``data``'s run, in ``fixes.FIXES`` order (at most one hint per fix)."""
    env = data.run.env or {}
    work = env.get("work") or {}
    pipe = work.get("pipeline") or {}
    hints: dict[str, str] = {}
    dens = _denoisers(work)
    for d in dens:
        classic = {k: n for k, n in (d.get("attention") or {}).items() if k in _CLASSIC}
        if classic:
            hints.setdefault("sdpa", "classic attention processors (" + ", ".join(f"{k} x {n}" for k, n in classic.items())
                             + ") on the denoiser")
        dev, dtype = str(d.get("device") or ""), d.get("dtype")
        if dev.startswith(("cuda", "xpu")) and dtype == "float32":
            hints.setdefault("fp16", f"the denoiser runs in float32 on {dev}")
            hints.setdefault("bf16", f"the denoiser runs in float32 on {dev}")
        if dev.startswith("cuda") and not d.get("compiled"):
            hints.setdefault("compile", f"the denoiser runs uncompiled on {dev}")
    offloaded = [name for name, facts in (("denoiser", pipe.get("denoiser") or {}),
                                          ("text_encoder", pipe.get("text_encoder") or {}), ("vae", pipe.get("vae") or {}))
                 if facts.get("offload")]
    if offloaded:
        hints.setdefault("no-offload", "CPU offload hooks on " + ", ".join(offloaded))
    syncs = _scheduler_syncs(data)
    if syncs:
        hints.setdefault("sync-free-scheduler", f"{syncs} host sync{'s' if syncs > 1 else ''} called from the scheduler's code")
    comp = env.get("compile") or {}
    calls = int(work.get("pipeline_calls") or 1)
    if comp.get("graph_breaks") or int(comp.get("frames_ok") or 0) > max(1, calls):
        hints["compile"] = (f"torch.compile: {comp.get('frames_ok', 0)} frames compiled, {comp.get('graph_breaks', 0)} "
                            "graph breaks: measure the denoiser compiled alone, compile time apart")
    from ..fixes import FIXES

    return [FixHint(f, hints[f]) for f in FIXES if f in hints]


def _scheduler_syncs(data: RunData) -> int:
    t = as_table(data.spans)
    if not len(t) or "sync" not in t.ops:
        return 0
    code = t.ops.index("sync")
    n = 0
    for row in (t.op == code).nonzero()[0].tolist():
        path = str((t.attrs.get(row) or {}).get("code.filepath") or "")
        if "/schedulers/" in path.replace("\\", "/"):
            n += 1
    return n


def try_command(data: RunData, hints: list[FixHint]) -> str | None:
    """``stepscope try --fix a,b -- <the run's command>``, or None without hints or a command."""
    cmd = list(data.run.command or [])
    if not hints or not cmd:
        return None
    return f"stepscope try --fix {','.join(h.fix for h in hints)} -- {shlex.join(cmd)}"
