"""The C recorder (stepscope.record.native._native, issue 31) against the pure-Python one, under the real `stepscope
run` on 3.11, 3.12 and 3.13 (tests/programs/recorders: plain functions, a ContextVar span between them, recursion,
exceptions caught and raised, generators (raising, thrown into and closed early, delegating), coroutines in asyncio
tasks (one cancelled), async generators (one closed early), threads): the stored spans are the same for both (name,
parent's name, exception type, thread) and nest in time; the run records which recorder it used; a .so that cannot
load is one line in the run's environment facts, the program's output unchanged."""

import collections
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from test_transparency import INTERPRETERS, NATIVE

from stepscope.store import spanblock

SRC = Path(__file__).parent.parent / "src"
PROGRAM = Path(__file__).parent / "programs" / "recorders"


def _env(store: Path, src: Path, recorder: str, path: tuple = ()) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE"))}
    env.update(PYTHONPATH=os.pathsep.join([*map(str, path), str(PROGRAM), str(src)]), STEPSCOPE_STORE=str(store),
               STEPSCOPE_RECORDER=recorder)
    return env


def _record(python: str, recorder: str, store: Path, src: Path = SRC, trace=("mixmod.*",), program="case_mixed.py",
            path: tuple = ()):
    """Run ``program`` (in tests/programs/recorders; ``path``: folders ahead of it on PYTHONPATH) under `stepscope
    run`, tracing ``trace``: (its completed process, the run's spans, the run's env)."""
    cmd = [sys.executable, "-m", "stepscope", "run", "-q", *[a for n in trace for a in ("--trace", n)], "--", python,
           program]
    p = subprocess.run(cmd, cwd=PROGRAM, env=_env(store, src, recorder, path), capture_output=True, text=True,
                       timeout=120)
    db = sqlite3.connect(store / "runs.db")
    try:
        ((rid, env),) = db.execute("SELECT id, env FROM runs").fetchall()
        spans = list(spanblock.iter_spans(db, rid))
    finally:
        db.close()
    return p, spans, json.loads(env)


def _shape(spans) -> collections.Counter:
    """Each span as (name, parent's name, exception type, main thread or not), counted (a parent never stored:
    "(not stored)")."""
    by_id = {s[0]: s for s in spans}
    main = next(s[6] for s in spans if s[3] == "transaction")
    return collections.Counter((s[2], by_id[s[1]][2] if s[1] in by_id else s[1] and "(not stored)", s[7], s[6] == main)
                               for s in spans)


@pytest.mark.parametrize("python", INTERPRETERS)
def test_both_recorders_store_the_same_spans(python, tmp_path):
    if not NATIVE[python]:
        pytest.skip("stepscope.record.native._native could not be built for this interpreter (no C compiler?)")
    plain = subprocess.run([python, "case_mixed.py"], cwd=PROGRAM, capture_output=True, text=True, timeout=60,
                           env=dict(_env(tmp_path, SRC, "python"), STEPSCOPE_STORE=""))
    shapes, childless = {}, {}
    for recorder in ("native", "python"):
        p, spans, env = _record(python, recorder, tmp_path / recorder)
        assert (p.returncode, p.stdout, p.stderr) == (plain.returncode, plain.stdout, plain.stderr)
        assert env["recorder"] == recorder and "recorder_note" not in env
        shapes[recorder] = _shape(spans)
        parents = {s[1] for s in spans}
        childless[recorder] = sum(1 for s in spans if s[2] == "mixmod.maybe" and s[0] not in parents)
        by_id = {s[0]: s for s in spans}
        for s in spans:  # a span lies inside its parent's time, in the same thread (the root: the main thread's)
            parent = by_id.get(s[1])
            if parent is not None:
                assert parent[4] <= s[4] <= s[5] <= parent[5], (s, parent)
                assert parent[6] == s[6] or parent[3] == "transaction", (s, parent)
    assert shapes["native"] == shapes["python"], shapes["native"] - shapes["python"]
    shape = shapes["native"]
    assert shape[("mixmod.leaf", "manual.block", None, True)] == 2 * 4  # middle(1) and the 3 coros' middle
    assert shape[("mixmod.fail", "mixmod.caught", "ValueError", False)] == 2
    assert shape[("mixmod.fail", "mixmod.outer", "KeyError", True)] == 1
    assert shape[("mixmod.deep", "mixmod.deep", None, True)] == 5
    assert shape[("mixmod.middle", "mixmod.coro", None, True)] == 3
    # generators, coroutines and async generators (the C recorder's on 3.12+): 3 runs of outer (2 workers, main)
    assert shape[("mixmod.gen_fail", "mixmod.gen_cases", "KeyError", True)] == 1
    # after the ValueError thrown in was caught (3.11's instrumented code sees no throw: the catcher's span is not
    # current again until its next yield, the call lands under its caller)
    version = tuple(json.loads(subprocess.run([python, "-c", "import sys; print(list(sys.version_info[:2]))"],
                                              capture_output=True, text=True).stdout))
    assert shape[("mixmod.leaf", "mixmod.catcher" if version >= (3, 12) else "mixmod.gen_cases", None, True)] == 1
    assert shape[("mixmod.catcher", "mixmod.gen_cases", None, True)] == 1  # closed early: no error
    assert shape[("mixmod.nested", "mixmod.nested", None, False)] == 2 * 2  # yield from itself
    assert shape[("mixmod.sleeper", "mixmod.amain", "asyncio.exceptions.CancelledError", True)] == 1
    assert shape[("mixmod.coro", "mixmod.amain", None, False)] == 2 * 3  # each task under the coroutine that made it
    assert shape[("mixmod.agen", "mixmod.amain", None, True)] == 2  # one closed early, one run out
    # a generator dropped while suspended (3.13: no event; its span ends at its last yield): one span each, and the
    # next one's span is its own (no child)
    assert shape[("mixmod.maybe", "mixmod.abandoned", None, True)] == 2
    assert shape[("mixmod.leaf", "mixmod.maybe", None, True)] == 1  # the dropped one's call
    assert childless == {"native": 3, "python": 3}, childless  # maybe(0)'s, one per run of outer


def test_a_native_module_that_cannot_load_is_one_line_in_the_run(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SRC / "stepscope", src / "stepscope", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (src / "stepscope" / "record" / "native" / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))).write_bytes(
        b"not an ELF file")
    plain = subprocess.run([sys.executable, "case_mixed.py"], cwd=PROGRAM, capture_output=True, text=True,
                           timeout=60, env=dict(_env(tmp_path, src, ""), STEPSCOPE_STORE=""))
    p, spans, env = _record(sys.executable, "", tmp_path / "store", src)
    assert (p.returncode, p.stdout, p.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert env["recorder"] == "python"
    note = env["recorder_note"]
    assert note.startswith("native recorder: cannot load stepscope.record.native._native: ImportError:")
    assert "\n" not in note
    assert _shape(spans)[("mixmod.deep", "mixmod.deep", None, True)] == 5


DENOISERS = ["diffusers.pipelines.pipeline_fake.FakePipeline.__call__",
             "diffusers.schedulers.scheduling_ddim.DDIMScheduler.step",
             "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
             "diffusers.models.unets.unet_2d_blocks.CrossAttnDownBlock2D.forward",
             "diffusers.models.transformers.transformer_2d.Transformer2DModel.forward"]


UNET, BLOCK, XFMR = (DENOISERS[2], DENOISERS[3], DENOISERS[4])


@pytest.mark.parametrize("python", INTERPRETERS)
@pytest.mark.parametrize("traced", [(UNET, XFMR), (BLOCK, XFMR)], ids=["unet", "blocks-in-an-untraced-unet"])
def test_the_outermost_denoiser_calls_are_the_same_records_made_in_c(python, traced, tmp_path):
    """The outermost denoiser calls, made in C (record/native/outer.c) where the Python probe made them, are the same
    records: names, parents, steps counted by timestep objects (no scheduler step traced), nested or not, the error
    of one that raises, the thread, and the memory and CPU-wait readings of each outermost one; blocks traced inside an
    untraced UNet take its step through the Python probe in both (tests/programs/recorders/case_outer.py)."""
    if not NATIVE[python]:
        pytest.skip("stepscope.record.native._native could not be built for this interpreter (no C compiler?)")
    shapes, read = {}, {}
    for recorder in ("native", "python"):
        p, spans, renv = _record(python, recorder, tmp_path / recorder, trace=traced, program="case_outer.py",
                                 path=(PROGRAM / "fakediff",))
        assert (p.returncode, p.stdout, p.stderr) == (0, "0\nbad shape\n0\n", "")
        by_id = {s[0]: s for s in spans}
        short = {n: n.rsplit(".", 2)[-2] for n in traced}
        rows = []
        for s in sorted(spans, key=lambda s: s[4]):
            if s[2] in short:
                a, parent = s[8] or {}, by_id.get(s[1])
                rows.append((short[s[2]], short.get(parent[2], parent[3]) if parent else None, a.get("diffusion.step"),
                             bool(a.get("diffusion.nested")), s[7], s[6]))
                if not a.get("diffusion.nested"):
                    read.setdefault(recorder, []).append(
                        a.get("memory.rss_in", 0) > 0 and a.get("memory.rss_out", 0) > 0 and a.get("cpu.wait_ns", -1) >= 0)
        threads = list(dict.fromkeys(r[5] for r in rows))
        shapes[recorder] = [(*r[:5], threads.index(r[5])) for r in rows]
    assert shapes["native"] == shapes["python"]
    assert read["native"] == read["python"] and all(read["native"])
    rows = shapes["native"]
    top = "UNet2DConditionModel" if traced[0] == UNET else "CrossAttnDownBlock2D"
    per_call = 1 if top == "UNet2DConditionModel" else 2
    assert [r[2] for r in rows if r[0] == top and r[5] == 0] == [k for k in range(3) for _ in range(2 * per_call)]
    assert all(r[3] == (top != "UNet2DConditionModel") for r in rows if r[0] == top)  # blocks: inside the UNet
    assert [r for r in rows if r[4] is not None and r[1] == "transaction"] == [
        ("Transformer2DModel", "transaction", 3, False, "ValueError", 0)]  # the outermost one that raised: its step


@pytest.mark.parametrize("python", INTERPRETERS)
def test_denoisers_inside_denoisers_take_the_outer_calls_step_with_both_recorders(python, tmp_path):
    """The C recorder records a denoiser called inside an open denoiser call (a UNet's blocks, the transformers in
    them) itself, with the step of the call around it (``diffusion.step``, ``diffusion.nested``); the outermost
    calls stay on the Python probe. Both recorders store the same spans, tags and errors (tests/programs/recorders/
    case_denoisers.py, a stand-in for diffusers: non-batched guidance, a transformer that raises, a transformer as
    the outermost denoiser, a pipeline in a thread)."""
    if not NATIVE[python]:
        pytest.skip("stepscope.record.native._native could not be built for this interpreter (no C compiler?)")
    shapes = {}
    for recorder in ("native", "python"):
        p, spans, renv = _record(python, recorder, tmp_path / recorder, trace=DENOISERS, program="case_denoisers.py",
                                 path=(PROGRAM / "fakediff",))
        assert (p.returncode, p.stdout, p.stderr) == (0, "0\n2\n0\n", "")
        assert renv["recorder"] == recorder
        by_id = {s[0]: s for s in spans}
        short = {n: n.rsplit(".", 2)[-2] for n in DENOISERS}
        rows = []
        for s in sorted(spans, key=lambda s: s[4]):
            if s[2] not in short:
                continue
            a = s[8] or {}
            parent = by_id.get(s[1])
            rows.append((short[s[2]], short.get(parent[2], parent[3]) if parent else None, a.get("diffusion.step"),
                         bool(a.get("diffusion.nested")), s[7], s[6]))
        # the outermost calls read the memory and the thread's CPU wait at their entry and exit (C: one call each)
        outer = [s[8] or {} for s in spans if s[2] in short and not (s[8] or {}).get("diffusion.nested")]
        assert outer and all(a.get("memory.rss_in", 0) > 0 and a.get("memory.rss_out", 0) > 0
                             and a.get("cpu.wait_ns", -1) >= 0 for a in outer), outer
        threads = list(dict.fromkeys(r[5] for r in rows))  # thread ids differ from run to run: their order
        shapes[recorder] = [(*r[:5], threads.index(r[5])) for r in rows]
    assert shapes["native"] == shapes["python"]
    rows = shapes["native"]
    main, worker = 0, 1
    unet = [r for r in rows if r[0] == "UNet2DConditionModel" and r[5] == main]
    assert [r[2] for r in unet] == [0, 0, 1, 1, 2, 2] and not any(r[3] for r in unet)
    blocks = [r for r in rows if r[0] == "CrossAttnDownBlock2D" and r[5] == main]
    assert [r[2] for r in blocks] == [k for k in range(3) for _ in range(4)]
    assert all(r[1] == "UNet2DConditionModel" and r[3] for r in blocks)
    inner = [r for r in rows if r[0] == "Transformer2DModel" and r[1] == "CrossAttnDownBlock2D" and r[5] == main]
    assert len(inner) == 3 * 2 * 2 * 3 and all(r[3] for r in inner)
    assert [r[2] for r in inner] == [k for k in range(3) for _ in range(12)]
    assert [r[4] for r in inner].count("ValueError") == 3 * 2 * 2
    alone = [r for r in rows if r[0] == "Transformer2DModel" and r[1] != "CrossAttnDownBlock2D"]
    assert alone == [("Transformer2DModel", "transaction", 0, False, None, main)]  # the outermost: a step of its own
    assert [r[2] for r in rows if r[0] == "UNet2DConditionModel" and r[5] == worker] == [0, 0, 1, 1]


def test_finished_calls_drain_into_span_blocks_in_order(tmp_path, monkeypatch):
    """The recorder thread's flush drains the C recorder's calls straight into span blocks
    (``buffer.take_native_blocks``): at most ``max_spans`` each, oldest first, the same spans (ids, parents, names,
    ops, thread, exception type) as the tuples ``take`` gives, readable by ``store.spanblock``."""
    from stepscope.record.spans import buffer
    from stepscope.record import native

    if native.ext is None:
        pytest.skip("the C recorder is not loaded in this interpreter")
    import stepscope
    from stepscope.store import spanblock

    (tmp_path / "blockmod.py").write_text(
        "def leaf(x):\n    return x + 1\n\n"
        "def boom():\n    raise KeyError('k')\n\n"
        "def outer(n):\n    for i in range(n):\n        leaf(i)\n    try:\n        boom()\n    except KeyError:\n"
        "        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stepscope.init(functions_to_trace=["blockmod.*"], profiles_hz=0, store=str(tmp_path / "store"),
                   flush_interval_s=3600)
    try:
        import blockmod

        buffer.take()
        for run in range(2):
            blockmod.outer(5)
            if run == 0:
                tuples = buffer.take()
        blocks = buffer.take_native_blocks(spanblock.dumps_header, 3)
    finally:
        stepscope.shutdown()
    assert [b[1] for b in blocks] == [3, 3, 1]
    got = [s for body, n, first in blocks for s in spanblock.spans_of(body)]
    assert [b[2] for b in blocks] == [got[0][0], got[3][0], got[6][0]]
    assert [list(spanblock.ids_of(b[0])) for b in blocks] == [[s[0] for s in got[k:k + 3]] for k in (0, 3, 6)]
    assert [s[5] for s in got] == sorted(s[5] for s in got)  # in the order the calls ended
    assert min(s[0] for s in got) > max(s[0] for s in tuples)  # (the first call's spans were taken as tuples)
    shape = lambda spans: [(s[2], s[3], s[6], s[7], s[8], s[1] is None) for s in spans]  # noqa: E731
    assert shape(got) == shape(tuples)
    assert [s[7] for s in got].count("KeyError") == 1
    by_id = {s[0]: s for s in got}
    assert {by_id[s[1]][2] for s in got if s[2] == "blockmod.leaf"} == {"blockmod.outer"}
    assert all(s[4] <= s[5] for s in got)


@pytest.mark.parametrize("python", INTERPRETERS)
def test_tracing_behaviour_on_each_interpreter(python):
    """tests/test_tracing_behaviour.py (values, exceptions, nesting, generators closed or dropped, coroutines,
    threads, globals) under each interpreter and recorder: the suite's own interpreter is 3.11, and what differs
    by interpreter (3.13 closes a suspended generator with no event) is only seen there."""
    if subprocess.run([python, "-c", "import pytest"], capture_output=True).returncode != 0:
        pytest.skip(f"{python} has no pytest")
    here = Path(__file__).parent
    for recorder in ("native", "python") if NATIVE[python] else ("python",):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE"))}
        env.update(PYTHONPATH=os.pathsep.join([str(SRC), str(here / "targets")]), STEPSCOPE_RECORDER=recorder)
        p = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_tracing_behaviour.py"],
                           cwd=here.parent, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (recorder, p.stdout[-3000:], p.stderr[-2000:])


def test_calls_finished_while_they_are_taken_wait_for_the_next_take(tmp_path, monkeypatch):
    """``take`` calls Python code per call (the exception type's name; on 3.11 the garbage collector in any
    allocation), which can hand the GIL to a thread that finishes more traced calls (and moves the C recorder's
    columns). Those wait for the next take: none lost, none handed over twice, and the list never written past its
    end (the heap corruption this caused)."""
    from stepscope.record.spans import buffer
    from stepscope.record import native

    if native.ext is None:
        pytest.skip("the C recorder is not loaded in this interpreter")
    import stepscope

    (tmp_path / "reentmod.py").write_text(
        "def leaf(x):\n    return x + 1\n\n"
        "def boom(err):\n    raise err('k')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stepscope.init(functions_to_trace=["reentmod.*"], profiles_hz=0, store=str(tmp_path / "store"),
                   flush_interval_s=3600)
    try:
        import reentmod

        fired = []

        class Meta(type):
            pass

        def module_of(cls):  # read by take (error_name), in the middle of its loop: 200 more calls end there
            if not fired:
                fired.append(True)
                for i in range(200):
                    reentmod.leaf(i)
            return "reentmod_errors"

        Meta.__module__ = property(module_of)
        Boom = Meta("Boom", (Exception,), {})
        buffer.take()
        for i in range(3):
            reentmod.leaf(i)
        try:
            reentmod.boom(Boom)
        except Exception:
            pass
        for i in range(3):
            reentmod.leaf(i)
        first = buffer.take()
        second = buffer.take()
    finally:
        stepscope.shutdown()
    assert fired
    ids = [s[0] for s in first + second]
    assert len(ids) == len(set(ids)) == 3 + 1 + 3 + 200
    assert len(first) == 7 and [s[7] for s in first].count("reentmod_errors.Boom") == 1
    assert all(s[2] == "reentmod.leaf" for s in second)


def test_a_later_session_takes_the_kept_instrumented_code_and_records_its_own_calls(tmp_path, monkeypatch):
    """3.11's mechanism (``STEPSCOPE_TRACING=code`` on 3.12+) keeps the instrumented code of C-recorded functions
    between sessions (``mechanism._KEPT``): a later session runs the same code object (the interpreter's
    specialisation of it kept), its C probe rebound, so its calls are that session's spans under the same names;
    between sessions the function runs its own code; two functions of one code object traced at once each get code
    of their own; the compile-time note's probe id names the current session's probe."""
    from stepscope.record import native

    if native.ext is None:
        pytest.skip("the C recorder is not loaded in this interpreter")
    import stepscope
    from stepscope.record.spans import buffer
    from stepscope.record.tracing import mechanism, patch, probes

    monkeypatch.setenv("STEPSCOPE_TRACING", "code")
    (tmp_path / "keptmod.py").write_text(
        "def leaf(x):\n    return x + 1\n\n"
        "def outer(n):\n    return [leaf(i) for i in range(n)]\n\n"
        "def make():\n    def twin(x):\n        return x * 2\n    return twin\n\n"
        "one = make()\ntwo = make()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import keptmod

    original = keptmod.leaf.__code__
    assert keptmod.one.__code__ is keptmod.two.__code__
    codes, names = [], []
    for session in range(3):
        stepscope.init(functions_to_trace=["keptmod.leaf", "keptmod.outer", "keptmod.one", "keptmod.two"],
                       profiles_hz=0, store=str(tmp_path / "store"), flush_interval_s=3600)
        try:
            buffer.take()
            buffer.take_native_blocks(lambda *a: b"", 1 << 20)
            assert keptmod.leaf.__code__ is not original
            assert keptmod.one.__code__ is not keptmod.two.__code__
            codes.append((keptmod.leaf.__code__, keptmod.outer.__code__))
            assert keptmod.outer(3 + session) == list(range(1, 4 + session))
            assert (keptmod.one(2), keptmod.two(3)) == (4, 6)
            kept = mechanism._KEPT[original]
            assert kept[3] and probes.probe(kept[2]) is patch._TRACED[keptmod.leaf]
            names.append(collections.Counter(s[2] for s in buffer.take()))
        finally:
            stepscope.shutdown()
        assert keptmod.leaf.__code__ is original and keptmod.one.__code__ is keptmod.two.__code__
        assert keptmod.outer(2) == [1, 2]
    assert codes[1] == codes[0] and codes[2] == codes[0]  # (the same code objects: ``is`` for each, as == is)
    assert all(c is d for c, d in zip(codes[0], codes[2]))
    for session, got in enumerate(names):
        assert got == {"keptmod.leaf": 3 + session, "keptmod.outer": 1, "keptmod.one": 1, "keptmod.two": 1}, got
