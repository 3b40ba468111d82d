"""Per-node tables of a node-graph app (ComfyUI, InvokeAI: ``--app``): each node's executions across prompts, and each
prompt's nodes.

Node spans have op ``node`` (named ``TYPE #ID`` by the app preset, ``apps``), with attrs ``node.type``, ``node.id``
and ``node.cached`` (the app returned its outputs from its cache: it did not run); prompt spans have op ``prompt``,
with ``prompt.id`` and ``prompt.nodes`` (the nodes in the prompt). A node span belongs to the prompt span around
it (its nearest ``prompt`` ancestor), else to none.

Statistics are over the executions that ran (cached ones counted apart): count, total, mean, p50, p95, standard
deviation (population, ns). A prompt's cached nodes: ``prompt.nodes`` minus the nodes that ran, when the prompt
says how many it has (an app skips nodes cached upstream without calling them), else its cached executions.

``output/terminal/nodes.py`` draws the tables; the step table names a call made inside a node ``prompt K · NODE``
(``StepTable.call_labels``), and so do the memory stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.spantable import as_table

NODE_OP = "node"
PROMPT_OP = "prompt"


@dataclass(slots=True)
class NodeStat:
    """One node (by name ``TYPE #ID``) across the run: ``count`` executions that ran, ``cached`` ones that did not;
    times in ns over those that ran; ``share``: of all node time (0..1); ``prompts``: in how many prompts it ran."""

    name: str
    type: str
    count: int
    cached: int
    total_ns: int
    mean_ns: float
    p50_ns: float
    p95_ns: float
    std_ns: float
    max_ns: int
    share: float
    prompts: int


@dataclass(slots=True)
class PromptRow:
    """One prompt: its index (0-based, in start order), ``prompt_id`` (or ""), ``wall_ns`` (its span; for node spans
    outside any prompt span: from the first node's start to the last one's end), nodes ``ran`` and ``cached``,
    the time of its nodes that ran (``node_ns``), and the slowest node (name, ns)."""

    index: int
    prompt_id: str
    wall_ns: int
    start_ns: int
    ran: int
    cached: int
    node_ns: int
    slowest: str
    slowest_ns: int


@dataclass(slots=True)
class NodeTable:
    """Per-node statistics (``nodes``, by total time, largest first) and per-prompt rows (``prompts``, in order);
    ``types``: per node type, the same statistics over every node of that type."""

    nodes: list[NodeStat]
    prompts: list[PromptRow]
    types: list[NodeStat] = field(default_factory=list)


def _stats(name: str, typ: str, dur: np.ndarray, cached: int, prompts: int, all_ns: float) -> NodeStat:
    if len(dur):
        d = dur.astype(float)
        return NodeStat(name, typ, len(dur), cached, int(dur.sum()), float(d.mean()), float(np.percentile(d, 50)),
                        float(np.percentile(d, 95)), float(d.std()), int(dur.max()), float(dur.sum()) / all_ns, prompts)
    return NodeStat(name, typ, 0, cached, 0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, prompts)


def node_table(spans) -> NodeTable | None:
    """The per-node tables of a run's spans (Span objects or a ``SpanTable``), or None when no span has op ``node``."""
    t = as_table(spans)
    nodes = np.flatnonzero(t.op_mask(NODE_OP))
    if not len(nodes):
        return None
    prow = t.parent_rows()
    is_prompt = t.op_mask(PROMPT_OP)
    prompt_rows = np.flatnonzero(is_prompt)
    prompt_rows = prompt_rows[np.argsort(t.start[prompt_rows], kind="stable")]
    order = {int(r): k for k, r in enumerate(prompt_rows.tolist())}

    def prompt_of(r: int) -> int:
        p = int(prow[r])
        n = 0
        while p >= 0 and n < 10_000:
            if is_prompt[p]:
                return order[p]
            p = int(prow[p])
            n += 1
        return -1

    attrs = t.attrs or {}
    names = [t.names[int(c)] for c in t.name[nodes].tolist()]
    cached = np.array([bool((attrs.get(int(r)) or {}).get("node.cached")) for r in nodes.tolist()], bool)
    types = [str((attrs.get(int(r)) or {}).get("node.type") or n.split(" #", 1)[0]) for r, n in zip(nodes.tolist(), names)]
    owner = np.array([prompt_of(int(r)) for r in nodes.tolist()], np.int64)
    dur = t.dur[nodes]
    all_ns = float(dur[~cached].sum()) or 1.0
    def grouped(keys: list[str]) -> list[NodeStat]:
        """Statistics per key (a node's name, or its type), by total time, largest first."""
        groups: dict[str, list[int]] = {}
        for k, key in enumerate(keys):
            groups.setdefault(key, []).append(k)
        out = []
        for key, ks in groups.items():
            ks = np.array(ks)
            ran = ks[~cached[ks]]
            out.append(_stats(key, types[int(ks[0])], dur[ran], int(cached[ks].sum()), len(set(owner[ran].tolist())),
                              all_ns))
        return sorted(out, key=lambda s: (-s.total_ns, s.name))

    stats, tstats = grouped(names), grouped(types)
    prompts = []
    groups = [(k, int(r)) for k, r in enumerate(prompt_rows.tolist())]
    if (owner < 0).any():
        groups.append((-1, -1))
    for k, r in groups:
        mine = np.flatnonzero(owner == k)
        if not len(mine) and r < 0:
            continue
        ran = mine[~cached[mine]]
        a = attrs.get(r) or {} if r >= 0 else {}
        total = a.get("prompt.nodes")
        n_cached = int(total) - len(ran) if isinstance(total, int) and total >= len(ran) else int(cached[mine].sum())
        if r >= 0:
            start, wall = int(t.start[r]), int(t.end[r] - t.start[r])
        else:
            start = int(t.start[nodes[mine]].min())
            wall = int(t.end[nodes[mine]].max()) - start
        slow = int(ran[np.argmax(dur[ran])]) if len(ran) else -1
        prompts.append(PromptRow(len(prompts), str(a.get("prompt.id") or ""), wall, start, len(ran), n_cached,
                                 int(dur[ran].sum()), names[slow] if slow >= 0 else "",
                                 int(dur[slow]) if slow >= 0 else 0))
    return NodeTable(stats, prompts, tstats)
