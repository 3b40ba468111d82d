"""Traced by tests/test_native_recorder.py: plain functions (the C recorder's), a generator, a coroutine and an
async generator (the Python probe's), nested in each other, in threads and asyncio tasks, with exceptions."""

import asyncio
import threading

import stepscope


def leaf(x):
    return x + 1


def middle(x):
    with stepscope.span("manual.block"):  # a ContextVar span between two native ones
        return leaf(x) + leaf(x + 1)


def fail(kind):
    if kind == "key":
        raise KeyError(kind)
    raise ValueError(kind)


def caught():
    try:
        fail("value")
    except ValueError:
        return leaf(0)


def gen(n):
    for i in range(n):
        yield leaf(i)


def deep(n):
    return leaf(n) if n == 0 else deep(n - 1)


async def coro(i):
    await asyncio.sleep(0)
    return middle(i)


async def agen(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield leaf(i)


async def amain():
    out = await asyncio.gather(*(coro(i) for i in range(3)))
    return out, [x async for x in agen(2)]


def outer():
    total = sum(gen(3)) + middle(1) + deep(5) + caught()
    try:
        fail("key")
    except KeyError:
        pass
    return total, asyncio.run(amain())


def threaded():
    ts = [threading.Thread(target=outer, name=f"worker-{i}") for i in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return outer()
