"""torch.compile graphs and graph breaks of the tiny SD UNet, with and without stepscope tracing it.

Each configuration runs in its own process (a fresh Dynamo): the UNet is compiled with a counting
backend and called for 3 denoising steps. "traced" names the UNet's forward and every attention
processor's ``__call__`` (a glob), as `stepscope run --trace` would; "traced, compiled pipeline call"
also compiles a function that calls the UNet. Prints graphs, graph breaks, recompiles, the spans
stepscope recorded and what it reported as compiled, per configuration.

    python benchmarks/compile_transparency.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

TRACES = ["diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
          "diffusers.models.attention_processor.*.__call__"]

CHILD = r'''
import json, sys
trace = sys.argv[1] == "traced"
if trace:
    import stepscope
    stepscope.init(functions_to_trace=TRACES, profiles_hz=0, store=sys.argv[2], transaction="compile")
import torch
from torch._dynamo.utils import counters
from stepscope.pipelines.sd import build_pipeline
pipe = build_pipeline("tiny")
unet = pipe.unet
graphs = []
def backend(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward
x = torch.randn(2, 4, 8, 8)
enc = torch.randn(2, 77, unet.config.cross_attention_dim)
eager = unet(x, 10, encoder_hidden_states=enc).sample
compiled = torch.compile(unet, backend=backend)
for t in (999, 500, 1):
    out = compiled(x, t, encoder_hidden_states=enc).sample
same = torch.allclose(compiled(x, 10, encoder_hidden_states=enc).sample, eager, atol=1e-5)
result = {"graphs": len(graphs), "graph_nodes": graphs, "graph_breaks": sum(counters["graph_break"].values()),
          "recompiles": sum(counters["recompiles"].values()) if "recompiles" in counters else None, "same_output": same}
if trace:
    from stepscope.record.tracing import buffer
    session = stepscope.record.api.current_session()
    eager_spans = len([s for s in buffer.finished])
    stepscope.shutdown()
    result["unresolved_or_compiled"] = session.unresolved
print("RESULT " + json.dumps(result))
'''


def run(mode: str) -> dict:
    store = tempfile.mkdtemp(prefix="stepscope-compile-")
    code = CHILD.replace("TRACES", repr(TRACES))
    p = subprocess.run([sys.executable, "-c", code, mode, store], capture_output=True, text=True)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode or not line:
        raise SystemExit(f"{mode}: failed\n{p.stderr[-3000:]}")
    res = json.loads(line[0][len("RESULT "):])
    if mode == "traced":
        import collections
        import sqlite3

        from stepscope.store import spanblock

        db = sqlite3.connect(f"{store}/runs.db")
        res["spans"] = dict(collections.Counter(s[2] for (rid,) in db.execute("select id from runs")
                                                for s in spanblock.iter_spans(db, rid)))
    return res


def main() -> None:
    plain, traced = run("plain"), run("traced")
    print(f"{'':22}{'graphs':>8}{'breaks':>8}  graph nodes   same output")
    for name, r in (("untraced", plain), ("traced (forward+attn)", traced)):
        print(f"{name:22}{r['graphs']:>8}{r['graph_breaks']:>8}  {str(r['graph_nodes']):12}  {r['same_output']}")
    print("spans recorded while traced (eager calls):", traced.get("spans"))
    for name, why in (traced.get("unresolved_or_compiled") or {}).items():
        print(f"  {name}: {why}")
    same = plain["graphs"] == traced["graphs"] and plain["graph_breaks"] == traced["graph_breaks"]
    print("same graphs and graph breaks:", same)


if __name__ == "__main__":
    main()
