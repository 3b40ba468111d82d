import asyncio
import time


def add(a, b=2, *, c=3):
    """Add things."""
    return a + b + c


def boom(kind="value"):
    if kind == "value":
        raise ValueError("boom")
    raise KeyError(kind)


def outer(n):
    return [inner(i) for i in range(n)]


def inner(i):
    return i * 2


def count(n):
    """A generator."""
    for i in range(n):
        got = yield i
        if got is not None:
            yield ("got", got)
    return "done"


def gen_with_inner(n):
    for i in range(n):
        yield inner(i)


async def coro(x, delay=0.0):
    await asyncio.sleep(delay)
    return inner(x)


async def agen(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield inner(i)


def sleep_ms(ms):
    time.sleep(ms / 1000)


calls = 0


def bump(n):
    """Add 2n to a module global declared after a first statement, and record a large n in another declared
    inside a block (the shape of torch.distributed's destroy_process_group)."""
    step = n * 2
    global calls
    calls += step
    if n > 5:
        global biggest
        biggest = n
    try:
        return calls
    finally:
        global last
        last = n
