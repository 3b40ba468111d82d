from . import good


def work(x):
    return good.work(x) + 1


raise RuntimeError(f"broken at import: {work(1)}")
