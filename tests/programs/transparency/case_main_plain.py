def g(x: int) -> int:
    return x + 1
print(g.__annotations__, g(1), sorted(k for k in dir() if k.startswith("__")), globals() is locals())
