"""Traced by tests/test_native_recorder.py: plain functions, generators, coroutines and async generators (the C
recorder's; on 3.11 the generators and coroutines are the Python probe's), nested in each other, in threads and
asyncio tasks, with exceptions: raised in a generator, thrown into one and caught, then closed early, one that
delegates to itself (``yield from``), a cancelled task, an async generator closed early."""

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


def gen_fail(n):
    yield leaf(n)
    raise KeyError(n)


def catcher():
    try:
        yield 1
    except ValueError:
        yield leaf(5)


def nested(n):
    if n:
        yield from nested(n - 1)
    yield leaf(n)


def gen_cases():
    # (a generator closed while suspended outside any try block, on 3.13, ends with no event at all: no span)
    try:
        list(gen_fail(1))
    except KeyError:
        pass
    g = catcher()
    next(g)
    caught_value = g.throw(ValueError("thrown"))
    g.close()  # ends normally (GeneratorExit thrown in)
    return caught_value + sum(nested(2))


def maybe(n):
    if n:
        yield leaf(n)


def abandoned():
    g = maybe(1)
    next(g)
    del g  # 3.13: closed with no event at all (suspended outside any try block): its span ends at its yield
    return list(maybe(0))  # (its frame often at the same address: the first one's record must not end it)


async def sleeper():
    await asyncio.sleep(10)


async def coro(i):
    await asyncio.sleep(0)
    return middle(i)


async def agen(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield leaf(i)


async def amain():
    out = await asyncio.gather(*(coro(i) for i in range(3)))
    task = asyncio.create_task(sleeper())
    await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    ag = agen(5)
    first = await ag.__anext__()
    await ag.aclose()
    return out, [x async for x in agen(2)], first


def outer():
    total = sum(gen(3)) + middle(1) + deep(5) + caught() + gen_cases() + len(abandoned())
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
