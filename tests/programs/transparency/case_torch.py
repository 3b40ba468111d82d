"""torch.jit.script and torch.compile see the same code with and without stepscope."""
import sys

import torch
import torch.nn as nn
from torch._dynamo.utils import counters


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


torch.manual_seed(0)
net = Net()
x = torch.randn(2, 8)
eager = net(x)
scripted = torch.jit.script(Net())
print("script", type(scripted).__name__, tuple(scripted(x).shape))
graphs = []


def backend(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward


compiled = torch.compile(net, backend=backend)
out = compiled(x)
out = compiled(x)
print("graphs", graphs, "breaks", sum(counters["graph_break"].values()), torch.allclose(out, eager))
f = torch.compile(lambda t: net(t) * 2, backend=backend, fullgraph=True)
print("fullgraph", tuple(f(x).shape), len(graphs))
