"""Traced functions behave exactly as before, and their spans nest and cover the real execution."""

import asyncio
import inspect
import sys
import threading
import time

import pytest
from conftest import spans_now


@pytest.fixture
def traced(patcher):
    patcher.add(["sstargets.funcs.*"])
    from sstargets import funcs

    return funcs


def test_return_values_signature_and_metadata(traced):
    from sstargets.funcs import add

    assert traced.add(1, 2, c=4) == 7
    assert str(inspect.signature(traced.add)) == "(a, b=2, *, c=3)"
    assert traced.add.__name__ == "add" and traced.add.__qualname__ == "add" and traced.add.__doc__ == "Add things."
    assert traced.add.__module__ == "sstargets.funcs"
    assert add is traced.add


def test_exceptions_propagate_and_mark_the_span(traced):
    with pytest.raises(ValueError, match="boom"):
        traced.boom()
    with pytest.raises(KeyError):
        traced.boom("key")
    spans = spans_now()
    assert [(s["name"], s["error_type"]) for s in spans] == [("sstargets.funcs.boom", "ValueError"),
                                                              ("sstargets.funcs.boom", "KeyError")]


def test_nested_calls_nest(traced):
    traced.outer(3)
    spans = spans_now()
    outer = [s for s in spans if s["name"].endswith("outer")][0]
    inner = [s for s in spans if s["name"].endswith("inner")]
    assert len(inner) == 3 and all(s["parent_id"] == outer["span_id"] for s in inner)
    assert all(outer["start_ns"] <= s["start_ns"] <= s["end_ns"] <= outer["end_ns"] for s in inner)


def test_global_declarations_anywhere_in_the_body(traced):
    """A ``global`` after other statements or inside blocks: traced (3.11 compiles such a body again with the
    declarations once at its top), and the names are the module's."""
    traced.calls = 0
    assert traced.bump(3) == 6 and traced.bump(7) == 20
    assert traced.calls == 20 and traced.biggest == 7 and traced.last == 7
    assert [s["name"] for s in spans_now()] == ["sstargets.funcs.bump"] * 2


def test_generator_span_covers_iteration_and_send(traced):
    assert inspect.isgeneratorfunction(traced.count)
    g = traced.count(3)
    assert next(g) == 0
    assert g.send("x") == ("got", "x")
    assert list(g) == [1, 2]
    spans = spans_now()
    assert [s["name"] for s in spans] == ["sstargets.funcs.count"]


def test_generator_return_value_and_close(traced):
    def drive():
        return (yield from traced.count(2))

    d = drive()
    assert list(d) == [0, 1]
    g = traced.count(5)
    next(g)
    g.close()
    spans = spans_now()
    assert len(spans) == 2 and all(s["error_type"] is None for s in spans)


def test_generators_left_suspended_end_once(traced):
    """A generator closed or freed at a yield, and a coroutine closed at an await: one span each, error-free. 3.13
    runs none of their code then and fires no event (a frame suspended outside any ``try`` block just completes):
    the span ends at the last suspension; before 3.13 a GeneratorExit runs through the frame, and it ends there."""
    for x in traced.count(5):
        if x == 1:
            break  # (freed here)
    g = traced.count(3)
    next(g)
    closing = time.perf_counter_ns()
    g.close()
    c = traced.coro(1)  # (asyncio.sleep(0): one bare yield, no event loop needed)
    c.send(None)
    c.close()
    spans = spans_now()
    assert sorted(s["name"] for s in spans) == ["sstargets.funcs.coro", "sstargets.funcs.count",
                                                 "sstargets.funcs.count"], spans
    assert all(s["error_type"] is None and s["start_ns"] <= s["end_ns"] for s in spans)
    closed = [s for s in spans if s["name"].endswith("count")][1]
    assert closed["end_ns"] <= closing if sys.version_info >= (3, 13) else closed["end_ns"] >= closing
    assert spans_now() == []


def test_generator_calls_nest_under_it_but_caller_context_is_untouched(traced):
    g = traced.gen_with_inner(2)
    next(g)
    traced.add(1)  # called by the consumer between resumptions: not a child of the generator
    list(g)
    spans = spans_now()
    gen = [s for s in spans if s["name"].endswith("gen_with_inner")][0]
    inner = [s for s in spans if s["name"].endswith(".inner")]
    add = [s for s in spans if s["name"].endswith(".add")][0]
    assert all(s["parent_id"] == gen["span_id"] for s in inner)
    assert add["parent_id"] is None


def test_coroutines_and_async_generators(traced):
    assert inspect.iscoroutinefunction(traced.coro) and inspect.isasyncgenfunction(traced.agen)

    async def main():
        a = await traced.coro(2, 0.01)
        b = [x async for x in traced.agen(3)]
        return a, b

    assert asyncio.run(main()) == (4, [0, 2, 4])
    spans = spans_now()
    coro = [s for s in spans if s["name"].endswith(".coro")][0]
    assert coro["end_ns"] - coro["start_ns"] >= 9_000_000  # covers the await
    ag = [s for s in spans if s["name"].endswith(".agen")][0]
    assert sum(1 for s in spans if s["name"].endswith(".inner") and s["parent_id"] == ag["span_id"]) == 3


def test_concurrent_asyncio_tasks_nest_per_task(traced):
    async def main():
        return await asyncio.gather(*(traced.coro(i, 0.01) for i in range(3)))

    assert asyncio.run(main()) == [0, 2, 4]
    spans = spans_now()
    coros = {s["span_id"] for s in spans if s["name"].endswith(".coro")}
    inner = [s for s in spans if s["name"].endswith(".inner")]
    assert len(coros) == 3 and {s["parent_id"] for s in inner} == coros


def test_threads_have_their_own_nesting(traced):
    barrier = threading.Barrier(2)

    def work():
        barrier.wait()
        traced.outer(2)

    ts = [threading.Thread(target=work) for _ in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    spans = spans_now()
    outers = {s["span_id"]: s["thread_id"] for s in spans if s["name"].endswith("outer")}
    for s in spans:
        if s["name"].endswith(".inner"):
            assert outers[s["parent_id"]] == s["thread_id"]


def test_manual_spans_and_trace_decorator():
    import stepscope
    from stepscope.record.spans import buffer

    buffer.take()

    @stepscope.trace
    def f(x):
        """doc"""
        return x

    with stepscope.transaction("txn", op="function"):
        with stepscope.span("part", step=3):
            assert f(5) == 5
    spans = spans_now()
    by = {s["name"]: s for s in spans}
    assert by["part"]["parent_id"] == by["txn"]["span_id"] and by["part"]["attrs"] == {"step": 3}
    assert by["test_tracing_behaviour.test_manual_spans_and_trace_decorator.<locals>.f"]["parent_id"] == by["part"]["span_id"]
    assert f.__doc__ == "doc"


def test_patching_and_unpatching_while_other_threads_call():
    """Capture windows patch and unpatch at run time: callers in other threads see the same results and
    exceptions throughout, and nothing stays patched."""
    from sstargets import funcs

    from stepscope.record.spans import buffer
    from stepscope.record.tracing.patch import Patcher

    original_add, original_boom = funcs.add, funcs.boom
    stop = threading.Event()
    errors = []

    def caller():
        while not stop.is_set():
            try:
                if funcs.add(1, 2, c=3) != 6:
                    errors.append("wrong result")
                try:
                    funcs.boom()
                except ValueError:
                    pass
                else:
                    errors.append("no exception")
            except Exception as e:  # anything else is a behaviour change
                errors.append(repr(e))

    threads = [threading.Thread(target=caller) for _ in range(4)]
    [t.start() for t in threads]
    for _ in range(50):
        p = Patcher()
        p.add(["sstargets.funcs.add", "sstargets.funcs.boom"])
        p.remove()
    stop.set()
    [t.join() for t in threads]
    buffer.take()
    assert errors == []
    assert funcs.add is original_add and funcs.boom is original_boom
