from __future__ import annotations
import os, sys
print(sorted(k for k in dir() if k.startswith("__")), globals() is locals())
print(list(globals())[:9])
print(os.path.isabs(__file__), type(__loader__).__name__, __spec__, __cached__, __package__, __name__)
def f(x: int) -> int:
    return x * 2
class K:
    def m(self):
        return f(3)
print(f.__annotations__, f(2), K().m(), f.__module__, f.__qualname__)
os.chdir("/")
with open(__file__) as fh:
    print(len(fh.read()) > 0)
