"""torch.compile of a module whose inherited ``__call__`` is traced: the same graphs, no break, no warning."""
import torch
from torch._dynamo.utils import counters

import tpnet

torch.manual_seed(0)
net = tpnet.Net()
x = torch.randn(2, 8)
eager = net(x)
graphs = []


def backend(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward


compiled = torch.compile(net, backend=backend)
out = compiled(x)
out = compiled(x)
print("graphs", graphs, "breaks", dict(counters["graph_break"]), torch.allclose(out, eager))
eager_compiled = torch.compile(tpnet.Net(), backend="eager")
eager_compiled(x)
explained = torch._dynamo.explain(tpnet.Net())(x)
print("explain", explained.graph_count, explained.graph_break_count, [str(r.reason)[:80] for r in explained.break_reasons])
