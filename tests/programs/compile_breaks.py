"""A compiled function with a data-dependent branch and a print (two graph breaks), called with three
shapes (recompilations)."""
import torch


def f(x):
    y = x * 2
    if y.sum() > 0:
        print("positive")
    return y + 1


g = torch.compile(f, backend="eager")
for shape in ((3,), (4,), (5, 2)):
    g(torch.ones(*shape))
print("done")
