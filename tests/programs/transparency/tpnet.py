"""nn.Module subclasses that inherit ``__call__`` (``nn.Module._wrapped_call_impl``): ``--trace tpnet.Net.__call__``
traces the base method for these classes only."""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
