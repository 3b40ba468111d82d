"""Traced by the transparency cases: functions captured at import, recursion, frames, classes."""
import enum
import functools
import inspect
import sys
import warnings


def handle(x):
    return x + 1


HANDLERS = {handle: "handle"}
KNOWN = {handle}
ORIGINAL = handle


def deep(n):
    return 0 if n == 0 else 1 + deep(n - 1)


def caller_name():
    return sys._getframe(1).f_code.co_name


def stack_caller():
    return inspect.stack()[1].function


def warn():
    warnings.warn("careful", UserWarning, stacklevel=2)


def fail(x):
    if x:
        raise ValueError(f"bad {x}")
    return x


class Point:
    def __init__(self, x):
        self.x = x

    def norm(self):
        return abs(self.x)


class Point3(Point):
    pass


class Color(enum.Enum):
    RED = 1

    def describe(self):
        return self.name.lower()


class Adder:
    def __call__(self, x):
        return x + 10


adder = Adder()


@functools.lru_cache(maxsize=None)
def cached(x):
    return x * 2


def _scale(x, k):
    return x * k


double = functools.partial(_scale, k=2)


class Base:
    def step(self):
        return "base"


class Sub(Base):
    pass


def gen(n):
    for i in range(n):
        got = yield i
        if got:
            yield f"got {got}"
    return "done"


async def coro(n):
    import asyncio
    await asyncio.sleep(0)
    return n * 3


async def agen(n):
    for i in range(n):
        yield i
