"""The step model, the one slow rule, the phases and the terminal tables, on recorded shapes (no program run)."""

import re

import numpy as np
from rich.console import Console

from stepscope.analysis.phases import importing, phases, sample_phase
from stepscope.analysis.slow import TOO_NOISY_TO_CALL_CV, call_slow, slow_cells
from stepscope.analysis.steptable import repeat_table, step_table
from stepscope.analysis.summary import summarize
from stepscope.core.model import Frame, Profile, Run, RunData, Span
from stepscope.analysis.calltree import ProfileIndex
from stepscope.output.terminal.cells import left_short
from stepscope.output.terminal.summary import print_summary
from stepscope.serve.ingest.steps import steps_from_names
from stepscope.core.steprules import NESTED_ATTR, STEP_ATTR

MS = 1_000_000
PIPE = "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.StableDiffusionPipeline.__call__"
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
XFMR = "diffusers.models.transformers.transformer_2d.Transformer2DModel.forward"
SCHED = "diffusers.schedulers.scheduling_ddim.DDIMScheduler.step"
CB = "__main__.on_step_end"


def _pipeline_spans(n=8, slow=(3, 7), nested=2, callback=True, tag_nested=True, cb_ms=40, unet_ms=10):
    """A pipeline call with n steps: UNet (with nested transformer spans), scheduler step, a traced
    callback (slow on ``slow`` steps)."""
    spans, sid, t = [], iter(range(1, 10_000)), 100 * MS
    root = Span(next(sid), None, "prog.py", "transaction", 0, 0, 1)
    pipe = Span(next(sid), root.span_id, PIPE, "function", t, 0, 1)
    spans += [root, pipe]
    t += MS
    for k in range(n):
        u = Span(next(sid), pipe.span_id, UNET, "function", t, t + unet_ms * MS, 1, attrs={STEP_ATTR: k})
        spans.append(u)
        for j in range(nested):
            a = t + MS + j * 3 * MS
            attrs = {STEP_ATTR: k, NESTED_ATTR: True} if tag_nested else {STEP_ATTR: k}
            spans.append(Span(next(sid), u.span_id, XFMR, "function", a, a + 2 * MS, 1, attrs=attrs))
        t += unet_ms * MS
        spans.append(Span(next(sid), pipe.span_id, SCHED, "function", t, t + MS, 1, attrs={STEP_ATTR: k}))
        t += MS
        d = cb_ms * MS if k in slow else MS // 2
        if callback:
            spans.append(Span(next(sid), pipe.span_id, CB, "function", t, t + d, 1))
        t += d + MS // 10
    pipe.end_ns = t + 5 * MS
    root.end_ns = t + 10 * MS
    return spans


def test_nested_denoiser_is_part_of_its_step_and_callbacks_get_columns():
    for tag_nested in (True, False):  # live runs tag nested spans; ingested ones only nest
        t = step_table(_pipeline_spans(tag_nested=tag_nested))
        assert [(r.call, r.step) for r in t.rows] == [(0, k) for k in range(8)]
        assert UNET in t.columns and XFMR in t.columns and CB in t.columns and SCHED in t.columns
        assert [k for k, r in enumerate(t.rows) if r.slow] == [3, 7] and t.shape == "every 4"
        r3, r2 = t.rows[3], t.rows[2]
        assert r3.by_name[CB] == 40 * MS and r3.by_name[XFMR] == 4 * MS
        assert r3.slow_cells and "wall" in r3.slow_cells and CB in r3.slow_cells and UNET not in r3.slow_cells
        assert r2.untraced_ns < MS  # the glue between traced calls only
    # the callback untraced: its time is the steps' untraced time
    t = step_table(_pipeline_spans(callback=False))
    assert [k for k, r in enumerate(t.rows) if r.slow] == [3]  # (step 7's callback runs after the last span)
    assert t.rows[3].untraced_ns >= 40 * MS and "untraced" in t.rows[3].slow_cells
    assert all(r.untraced_ns < 2 * MS for k, r in enumerate(t.rows) if k not in (3, 7))


def test_steps_from_names_keeps_nested_denoisers_in_their_step():
    spans = _pipeline_spans(tag_nested=False)
    got = steps_from_names([(s.span_id, s.parent_id, s.name, s.start_ns, s.thread_id) for s in spans])
    for s in spans:
        if s.name in (UNET, XFMR, SCHED):
            assert got[s.span_id] == s.attrs[STEP_ATTR], s.name


def test_a_step_index_going_back_is_another_pipeline_call():
    a = [s for s in _pipeline_spans(n=4, slow=()) if s.op != "transaction" and s.name != PIPE]
    b = [Span(s.span_id + 1000, None, s.name, s.op, s.start_ns + 10**9, s.end_ns + 10**9, 1, attrs=dict(s.attrs))
         for s in a]
    for s in a:
        s.parent_id = None
    t = step_table(a + b)
    assert [(r.call, r.step) for r in t.rows] == [(0, k) for k in range(4)] + [(1, k) for k in range(4)]


def test_one_rule_and_too_noisy_to_call():
    d = np.array([20, 21, 20, 80, 20, 19, 21, 80, 20, 20, 21, 79], float) * MS
    v = call_slow(d)
    assert np.nonzero(v.mask)[0].tolist() == [3, 7, 11] and not v.noisy and "MAD" in v.rule
    noisy = np.array([20, 45, 12, 80, 33, 9, 51, 26, 70, 15, 40, 22], float) * MS
    v = call_slow(noisy)
    assert v.noisy and not v.mask.any() and v.cv > TOO_NOISY_TO_CALL_CV and v.rule.startswith("too noisy to call")
    # the step table and repeat table use it too
    spans = [Span(i + 1, None, "f", "function", i * 100 * MS, i * 100 * MS + int(x), 1) for i, x in enumerate(d)]
    rt = repeat_table(spans, "f")
    assert [r.step for r in rt.slow_rows] == [3, 7, 11] and rt.rule == call_slow(d).rule
    spans = [Span(i + 1, None, "f", "function", i * 100 * MS, i * 100 * MS + int(x), 1) for i, x in enumerate(noisy)]
    rt = repeat_table(spans, "f")
    assert rt.noisy and not rt.slow_rows
    assert slow_cells(np.array([1, 1, 1, 9, np.nan], float)).tolist() == [False, False, False, True, False]


def _profile_run(spans, samples):
    """RunData whose samples are ``(t_ns, stack of (module, function))`` on thread 1."""
    frames, stacks, fidx, sidx = [], [], {}, {}
    st = []
    for t, stack in samples:
        ids = []
        for mod, fn in stack:
            key = (mod, fn)
            if key not in fidx:
                fidx[key] = len(frames)
                frames.append(Frame(fn, mod, f"/x/{mod.replace('.', '/')}.py" if mod != "__main__" else "/w/prog.py", 1))
            ids.append(fidx[key])
        ids = tuple(ids)
        if ids not in sidx:
            sidx[ids] = len(stacks)
            stacks.append(ids)
        st.append(sidx[ids])
    prof = Profile(frames=frames, stacks=stacks, sample_t_ns=[t for t, _ in samples], sample_thread=[1] * len(samples),
                   sample_stack=st, hz=100.0, thread_names={1: "MainThread"})
    end = max([s.end_ns for s in spans] + [samples[-1][0]])
    run = Run("r1", ["python", "prog.py"], status="ok", start_ns=0, end_ns=end)
    return RunData(run, spans, prof)


def test_phases_keep_start_up_and_imports_apart():
    spans = [Span(1, None, "prog.py", "transaction", 0, 1000 * MS, 1),
             Span(2, 1, "__main__.work", "function", 600 * MS, 900 * MS, 1)]
    imp = [("__main__", "<module>"), ("importlib._bootstrap", "_find_and_load"), ("diffusers", "<module>")]
    samples = [(t * 10 * MS, imp) for t in range(1, 55)]  # imports up to 550 ms
    samples += [(t * 10 * MS, [("__main__", "<module>"), ("__main__", "work"), ("numpy", "dot")]) for t in range(61, 90)]
    samples += [(700 * MS + 5 * MS, [("__main__", "<module>"), ("__main__", "work"), ("importlib._bootstrap", "_find_and_load")])]
    # `from PIL import Image` inside the work, PIL loaded already: the import statement's own time
    samples += [(800 * MS + 5 * MS, [("__main__", "<module>"), ("__main__", "work"), ("importlib._bootstrap", "_handle_fromlist")])]
    # a relative `from . import name` inside the work: C reads ``__spec__.parent``, no import function above it
    samples += [(850 * MS + 5 * MS, [("__main__", "<module>"), ("__main__", "work"), ("importlib._bootstrap", "ModuleSpec.parent")])]
    samples.sort()
    data = _profile_run(spans, samples)
    ix = ProfileIndex(data.profile)
    ph = phases(data, ix)
    assert ph.split and ph.startup_ns == 600 * MS and ph.work_ns == 300 * MS and ph.shutdown_ns == 100 * MS
    phase = sample_phase(ix, ph)
    assert phase[importing(ix)].tolist() == [0] * int(importing(ix).sum())  # every import is start-up
    s = summarize(data, ix)
    assert s.phases.split and not [f for f in s.top_self + s.top_total if "importlib" in f.name or f.name == "diffusers.<module>"]
    assert any(f.name == "numpy.dot" for f in s.top_self)
    assert any("_find_and_load" in f.name for f in s.phases.startup_top)
    # nothing traced and no well-known entry point: no work window, but the imports are still start-up
    data2 = _profile_run([Span(1, None, "prog.py", "transaction", 0, 1000 * MS, 1)], samples)
    ix2 = ProfileIndex(data2.profile)
    ph2 = phases(data2, ix2)
    assert not ph2.split and ph2.entry is None and ph2.startup_sampled_ns > 0
    s2 = summarize(data2, ix2)
    assert not [f for f in s2.top_self + s2.top_total if "importlib" in f.name or f.name == "diffusers.<module>"]
    assert any(f.name == "numpy.dot" for f in s2.top_self)
    out = _render(s2)
    assert "imports" in out and "are start-up" in out and "_find_and_load" not in out


def _render(summary) -> str:
    con = Console(width=160, record=True, file=open("/dev/null", "w"))
    print_summary(summary, con)
    return con.export_text()


def test_bare_run_work_starts_at_a_well_known_entry_point():
    """`stepscope run -- python txt2img.py` with nothing traced: the pipeline's __call__ on the sampled stacks marks
    the work; the imports and model building before it are start-up, the imports inside it too."""
    spans = [Span(1, None, "prog.py", "transaction", 0, 1000 * MS, 1)]
    pipe = ("diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion", "StableDiffusionPipeline.__call__")
    imp = [("__main__", "<module>"), ("importlib._bootstrap", "_find_and_load"), ("transformers.utils.import_utils", "fetch__all__")]
    build = [("__main__", "<module>"), ("diffusers.models.modeling_utils", "ModelMixin.from_pretrained"), ("torch.nn.init", "kaiming_uniform_")]
    work = [("__main__", "<module>"), pipe, ("torch.nn.modules.module", "Module._call_impl"), ("torch.nn.functional", "conv2d")]
    lazy = [("__main__", "<module>"), pipe, ("importlib._bootstrap", "_find_and_load"), ("PIL", "<module>")]
    samples = [(t * 10 * MS, imp) for t in range(1, 40)] + [(t * 10 * MS, build) for t in range(40, 60)]
    samples += [(t * 10 * MS, work) for t in range(60, 90)] + [(905 * MS, lazy)]
    samples += [(t * 10 * MS, [("__main__", "<module>"), ("atexit", "_run_exitfuncs")]) for t in range(92, 99)]
    data = _profile_run(spans, samples)
    ix = ProfileIndex(data.profile)
    ph = phases(data, ix)
    assert ph.split and ph.entry == ".".join(pipe)
    assert ph.work_start_ns == 590 * MS and ph.work_end_ns == 905 * MS  # the first entry sample's interval, the last
    s = summarize(data, ix)
    names = {f.name for f in s.top_self + s.top_total}
    assert "torch.nn.functional.conv2d" in names
    assert not [n for n in names if "import" in n or "fetch__all__" in n or "kaiming" in n or "atexit" in n], names
    assert any("fetch__all__" in f.name for f in s.phases.startup_top)
    out = _render(s)
    assert "before the first sample in StableDiffusionPipeline.__call__" in out and "cover the work" in out
    # an nn.Module call marks the work too (a script that drives the UNet itself); the spans still win when traced
    data3 = _profile_run(spans, [(t * 10 * MS, imp) for t in range(1, 40)] + [(t * 10 * MS, work[:1] + work[2:]) for t in range(50, 60)])
    ix3 = ProfileIndex(data3.profile)
    ph3 = phases(data3, ix3)
    first = int(np.flatnonzero(ix3.t == 500 * MS)[0])  # (its interval: the gap before it, as the index weighs it)
    assert ph3.entry == "torch.nn.modules.module.Module._call_impl"
    assert ph3.work_start_ns == 500 * MS - int(ix3.weight[first]) and ph3.work_end_ns == 590 * MS


def test_last_step_callback_is_in_the_last_step(tmp_path):
    """The last step's window runs on while its loop iteration does (the samples' line in the loop's
    function, against the source's for statement)."""
    src = tmp_path / "pipe.py"
    body = ["def call(self):", "    x = 0"] + ["    pass"] * 6 + ["    for t in self.timesteps:"] + ["        x += 1"] * 11 \
        + ["    y = 1"] * 12
    src.write_text("\n".join(body) + "\n")  # the loop holds lines 9-20; line 30 is after it
    spans = [s for s in _pipeline_spans(n=4, slow=(3,), callback=False)]
    pipe = next(s for s in spans if s.name == PIPE)
    loop = [("__main__", "<module>"), ("diffusers.pipelines.sd", "Pipe.__call__")]
    samples = []
    for s in spans:
        if s.name == UNET:
            samples += [(t, loop + [("diffusers.models.unets", "UNet.forward")]) for t in range(s.start_ns + MS, s.end_ns, 2 * MS)]
        if s.name == SCHED:
            samples.append((s.start_ns + MS // 2, loop + [("diffusers.schedulers", "DDIM.step")]))
    last_sched = max((s for s in spans if s.name == SCHED), key=lambda s: s.start_ns)
    t = last_sched.end_ns + MS
    while t < last_sched.end_ns + 40 * MS:  # the callback after the last step
        samples.append((t, loop + [("__main__", "on_step_end"), ("PIL.ImageFile", "_save")]))
        t += 2 * MS
    samples.append((t + 2 * MS, loop + [("diffusers.models.autoencoders", "VAE.decode")]))  # after the loop
    samples.sort()
    # every sample of the loop frame at one line in the loop, the decode at a later line
    data = _profile_run(spans, samples)
    prof = data.profile
    lines = {"UNet.forward": 10, "DDIM.step": 12, "on_step_end": 14, "VAE.decode": 30}
    new_frames = list(prof.frames)
    new_stacks = []
    for st in prof.stacks:
        leaf = prof.frames[st[2]].function
        fr = prof.frames[st[1]]
        f2 = Frame(fr.function, fr.module, str(src), lines.get(leaf, 10))
        new_frames.append(f2)
        new_stacks.append((st[0], len(new_frames) - 1) + tuple(st[2:]))
    prof.frames, prof.stacks = new_frames, new_stacks
    ix = ProfileIndex(prof)
    t = step_table(spans, index=ix)
    last = t.rows[-1]
    assert last.end_ns >= last_sched.end_ns + 35 * MS and last.end_ns < pipe.end_ns
    assert last.untraced_ns > 30 * MS and last.slow and last.fill and last.fill[0].function == "PIL.ImageFile._save"
    assert last.fill[0].via == "__main__.on_step_end"


def test_terminal_tables_never_cut_a_number_and_keep_function_names():
    assert left_short("a.very.long.module.path.Klass.method", 20) == "…path.Klass.method"
    assert left_short("a.very.long.module.path.Klass.method", 10) == "…Klass.method"  # never less than Class.method
    assert left_short("short.name", 20) == "short.name"
    spans = _pipeline_spans()
    data = _profile_run(spans, [(200 * MS, [("__main__", "<module>")])])
    s = summarize(data, ProfileIndex(data.profile))
    for width in (80, 120, 250):
        con = Console(width=width, record=True, color_system=None)
        print_summary(s, con)
        out = con.export_text()
        assert not re.search(r"\d…|…\d|\.\.\.\d", out), out
        for r in s.steps.rows:
            assert re.search(rf"(?<![\d.]){re.escape(f'{r.wall_ns / 1e6:.1f} ms')}", out), (width, r.wall_ns)
        assert "UNet2DConditionModel.forward" in out.replace("\n", "") or width < 100


def test_a_slow_first_step_beside_later_slow_ones_is_a_warm_up():
    d = np.array([160, 66, 67, 210, 66, 65, 66, 205, 67, 66, 65, 200], float) * MS
    v = call_slow(d)
    assert v.warmup and np.nonzero(v.mask)[0].tolist() == [3, 7, 11] and "warm-up" in v.rule
    alone = np.array([160, 66, 67, 66, 66, 65, 66, 67, 67, 66, 65, 66], float) * MS
    v = call_slow(alone)
    assert not v.warmup and np.nonzero(v.mask)[0].tolist() == [0]  # the shape "first"
    spans = [Span(i + 1, None, "f", "function", i * 300 * MS, i * 300 * MS + int(x), 1) for i, x in enumerate(d)]
    rt = repeat_table(spans, "f")
    assert rt.rows[0].warmup and not rt.rows[0].slow and [r.step for r in rt.slow_rows] == [3, 7, 11]
    assert rt.shape == "every 4"


def _request_spans(node: bool, steps=4, requests=2, gap_ms=600, wrap=False, slow_cb=(0, 1)):
    """A worker thread serving ``requests`` generations, each a denoise node (traced when ``node``) running
    ``steps`` UNet + scheduler steps with the step index counting on across requests (no pipeline call: the
    recorder's one scope per thread), ``gap_ms`` idle between requests. ``wrap``: each UNet call inside a traced
    ``UNet.__call__`` span (one step each: not a call of its own). ``slow_cb``: (request, step) after which an
    untraced callback of the loop waits 300 ms (a slow step, not a new call)."""
    spans, sid, t = [], iter(range(1, 10_000)), 100 * MS
    root = Span(next(sid), None, "app.py", "transaction", 0, 0, 1)
    spans.append(root)
    k = 0
    callbacks = []
    for r in range(requests):
        parent = root.span_id
        nd = None
        if node:
            nd = Span(next(sid), root.span_id, "app.invocations.denoise.DenoiseInvocation.invoke", "function", t, 0, 7)
            spans.append(nd)
            parent = nd.span_id
        t += MS
        for j in range(steps):
            up = parent
            if wrap:
                w = Span(next(sid), parent, "diffusers.UNet2DConditionModel.__call__", "function", t, t + 10 * MS, 7)
                spans.append(w)
                up = w.span_id
            spans.append(Span(next(sid), up, UNET, "function", t, t + 10 * MS, 7, attrs={STEP_ATTR: k}))
            t += 10 * MS
            spans.append(Span(next(sid), parent, SCHED, "function", t, t + MS, 7, attrs={STEP_ATTR: k}))
            t += MS
            if (r, j) == slow_cb:
                callbacks.append((t, t + 300 * MS))
                t += 300 * MS
            k += 1
        t += 2 * MS
        if nd is not None:
            nd.end_ns = t
        t += gap_ms * MS
    root.end_ns = t
    return spans, callbacks


def _idle_between(spans, callbacks=()):
    """Samples of the worker thread (7) every 5 ms: in the UNet inside the steps, in the loop's callback (waiting:
    its CPU clock still) where ``callbacks`` say, waiting for the next request elsewhere."""
    from stepscope.core.model import Frame, Profile

    frames = [Frame("Thread.run", "threading", "/x/t.py", 1), Frame("SessionQueue._run", "app.queue", "/x/q.py", 1),
              Frame("Condition.wait", "threading", "/x/t.py", 2),
              Frame("DenoiseInvocation.invoke", "app.invocations.denoise", "/x/d.py", 1),
              Frame("Module._call_impl", "torch.nn.modules.module", "/x/m.py", 1),
              Frame("UNet2DConditionModel.forward", "diffusers.models.unets.unet_2d_condition", "/x/u.py", 1),
              Frame("on_step_end", "app.callbacks", "/x/c.py", 1), Frame("sleep", "time", "", 0)]
    stacks = [(0, 1, 2), (0, 1, 3, 4, 5), (0, 1, 3, 6, 7)]
    t_end = max(s.end_ns for s in spans)
    ts, st, wall, cpu = [], [], [], []
    unet = [(s.start_ns, s.end_ns) for s in spans if s.name == UNET]
    for t in range(5 * MS, t_end, 5 * MS):
        busy = any(a <= t < b + 2 * MS for a, b in unet)
        in_cb = any(a <= t < b for a, b in callbacks)
        ts.append(t)
        st.append(1 if busy else 2 if in_cb else 0)
        wall.append(5 * MS)
        cpu.append(5 * MS if busy else 20_000)
    prof = Profile(frames=frames, stacks=stacks, sample_t_ns=ts, sample_thread=[7] * len(ts), sample_stack=st, hz=200.0,
                   thread_names={7: "session-queue", 1: "MainThread"}, sample_wall_ns=wall, sample_cpu_ns=cpu)
    return prof


def test_steps_belong_to_the_call_that_drives_them():
    """A web app's generations without a pipeline __call__ (issue 27): the step numbering restarts, and a step ends,
    at the traced node around the steps; with nothing traced around them, where the worker leaves the function
    that drives the steps (the samples: it waits for the next request). The time between requests is never a
    step's; a slow callback inside the loop (the thread waiting in it) stays in its step and is slow."""
    for node in (True, False):
        spans, callbacks = _request_spans(node)
        prof = _idle_between(spans, callbacks)
        run = Run("r1", ["python", "app.py"], status="ok", start_ns=0, end_ns=max(s.end_ns for s in spans))
        data = RunData(run, spans, prof)
        tab = step_table(spans, index=ProfileIndex(data.profile))
        got = [(r.call, r.step) for r in tab.rows]
        assert got == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)], (node, got)
        walls = [r.wall_ns for r in tab.rows]
        assert walls[1] > 300 * MS and max(walls[:1] + walls[2:]) < 20 * MS, (node, walls)  # no idle between requests
        assert [(r.call, r.step) for r in tab.slow_rows] == [(0, 1)], node
    # without samples, and nothing traced around the steps: no way to tell the requests apart (one call)
    spans, _ = _request_spans(False)
    assert {r.call for r in step_table(spans).rows} == {0}
    # a traced wrapper around each UNet call (one step inside it) is not a call: the node still is
    spans, _ = _request_spans(True, wrap=True)
    got = [(r.call, r.step) for r in step_table(spans).rows]
    assert got == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)], got


def test_idle_is_a_thread_whose_cpu_clock_did_not_move():
    """Idle apart as py-spy does (issue 27): a sample is idle when its thread did not run, whatever Python line it
    is on (a C wait has no idle leaf to tell it by); the main thread's wall ticks by the CPU ticks around them;
    the event loop's select is idle; without CPU times, the leaf rule, for every thread."""
    from stepscope.analysis.calltree import idle_mask

    funcs = [type("F", (), {"name": n})() for n in ("app.worker.loop", "selectors.EpollSelector.select", "app.work.step")]
    stack_funcs = [(0,), (1,), (2,)]
    ms = MS
    #            t       thread wall    cpu     stack
    rows = [(10 * ms, 2, 10 * ms, 5_000, 0),       # sampler thread, blocked in C (no idle leaf): idle
            (20 * ms, 2, 10 * ms, 9 * ms, 2),      # sampler thread, running: busy
            (30 * ms, 2, 10 * ms, 2 * ms, 2),      # 20% of the interval on CPU: busy
            (100 * ms, 1, 10 * ms, 0, 2),          # main: a wall tick next to a CPU tick: busy
            (105 * ms, 1, 0, 20 * ms, 2),          # main: a CPU tick: never idle
            (112 * ms, 1, 10 * ms, 0, 1),          # main: wall tick near the CPU tick, in the event loop's select: idle
            (400 * ms, 1, 10 * ms, 0, 0),          # main: no CPU tick within a CPU period: idle
            (500 * ms, 3, 10 * ms, float("nan"), 1),  # unknown CPU: a waiting leaf is idle, on any thread
            (510 * ms, 3, 10 * ms, float("nan"), 2)]
    t, th, w, c, st = (np.array(col) for col in zip(*rows))
    got = idle_mask(t.astype(np.int64), th.astype(np.int64), w.astype(float), c.astype(float), st.astype(np.int64),
                    stack_funcs, funcs)
    assert got.tolist() == [True, False, False, False, False, True, True, True, False]


def _with_cpu_wait(spans, waited_ms: dict[int, float]):
    """``spans`` with each UNet span carrying the thread's CPU-wait counter at its entry (``cpu.wait_in``) and its
    own wait (``cpu.wait_ns``): ``waited_ms`` step -> ms of wait in that step's window (in its UNet span)."""
    total = 0
    for s in spans:
        if s.name == UNET:
            k = s.attrs[STEP_ATTR]
            s.attrs["cpu.wait_in"] = total
            w = int(waited_ms.get(k, 0.2) * MS)
            s.attrs["cpu.wait_ns"] = w
            total += w
    return spans


def test_a_step_slow_only_by_its_wait_for_a_cpu_is_set_apart():
    # step 5's UNet took 30 ms longer, all of it waiting for a CPU (another process); steps 3 and 7 are slow by the
    # program's own callback
    spans = _pipeline_spans(slow=(3, 7))
    unet5 = next(s for s in spans if s.name == UNET and s.attrs[STEP_ATTR] == 5)
    end5 = unet5.end_ns
    for s in spans:  # every span from step 5's UNet end on moves 30 ms later (that UNet span ends 30 ms later)
        if s.start_ns >= end5:
            s.start_ns += 30 * MS
        if s.end_ns >= end5:
            s.end_ns += 30 * MS
    plain = step_table(spans)
    assert [k for k, r in enumerate(plain.rows) if r.slow] == [3, 5, 7]  # without the readings: slow by wall time
    t = step_table(_with_cpu_wait(spans, {5: 30}))
    assert [k for k, r in enumerate(t.rows) if r.slow] == [3, 7] and t.shape == "every 4"
    assert [k for k, r in enumerate(t.rows) if r.waited] == [5] and t.waited_count == 1
    assert abs(t.rows[5].cpu_wait_ns - 30 * MS) < MS and "repeat 5 slow only by its wait for a CPU" in t.rule
    # a slow step that also waited stays slow when its own time is slow
    t = step_table(_with_cpu_wait(_pipeline_spans(slow=(3, 7)), {3: 5}))
    assert [k for k, r in enumerate(t.rows) if r.slow] == [3, 7] and not any(r.waited for r in t.rows)


def test_call_slow_judges_the_time_less_the_wait():
    d = np.array([100, 101, 99, 100, 180, 100, 102, 98, 100, 190.0]) * MS
    w = np.array([1, 1, 1, 1, 79, 1, 1, 1, 1, 2.0]) * MS
    v = call_slow(d, w)
    assert v.mask.tolist() == [False] * 9 + [True] and v.waited.tolist() == [False] * 4 + [True] + [False] * 5
    # unknown waits (NaN) count as none; no wait at all: the plain rule
    v = call_slow(d, np.full(len(d), np.nan))
    assert v.waited is None and v.mask[4] and v.mask[9]
    # a machine busy all along: every step waited, noise that would hide the slow step once the waits are out
    rng = np.random.default_rng(0)
    w = rng.uniform(0, 80, 12) * MS
    d = 100 * MS + w
    d[6] += 60 * MS
    assert call_slow(d).noisy or not call_slow(d).mask[6] or call_slow(d).mask.sum() > 1
    v = call_slow(d, w)
    assert not v.noisy and v.mask.tolist() == [k == 6 for k in range(12)]
