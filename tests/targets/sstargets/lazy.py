"""Importing this module has a side effect the tracer must not trigger early."""
import os

os.environ["SSTARGETS_LAZY_IMPORTED"] = "1"


def late(x):
    return x + 100
