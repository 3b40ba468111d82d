"""``python -m minigraph.main [ROUNDS]``: run a small graph ROUNDS times (2), import a node module late and run its
node once, run a model; print what the program can see of its classes and results."""
import importlib
import sys

from . import invocations  # noqa: F401  (registers the nodes)
from .invocations.baseinvocation import REGISTRY
from .models import Net


def run_graph(graph):
    context = []
    out = {}
    for node in graph:
        fields = {k: v for k, v in node.items() if k != "type"}
        out.update(REGISTRY[node["type"]](**fields).invoke_internal(context))
    return context, out


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    graph = [{"type": "add", "a": 1, "b": 2}, {"type": "pass", "seed": 7}, {"type": "upper", "text": "cat"}]
    for _ in range(rounds):
        print(run_graph(graph))
    importlib.import_module("minigraph.invocations.late")
    print(run_graph([{"type": "late"}]))
    for name, cls in sorted(REGISTRY.items()):
        print(name, cls.__qualname__, [c.__name__ for c in cls.__mro__], sorted(vars(cls)), cls.__mro__[1].invoke.__name__)
    net = Net(3).to("cpu")
    print(net(2), net(5), net.parameters(), net.device, sorted(vars(type(net))))


if __name__ == "__main__":
    main()
