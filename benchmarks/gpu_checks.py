"""The checks of `make gpu-check` (issue 16), run by ``benchmarks/gpu_check.py`` inside its venv.

Every check reads stepscope's own outputs (the store, ``--json`` documents, the stored Kineto trace), except
where the figure is an independent measurement to compare with (Holistic Trace Analysis on the same trace,
``torch.utils.flop_counter`` on the same UNet, an SDPA backend probe, the program's own synchronised timings).
Each check runs in its own try block: one that raises is a FAIL row with its error line, and the others still run.

Rows: ``{"check", "figure", "bound", "status": PASS|FAIL|SKIP, "error"?}``. Checks, in the order run:

1. ``stepscope run --device-trace --syncs`` (UNet forward, attention processors, Euler's step, the pipeline call
   and the VAE decode traced) of the pipeline: (a) every UNet span has its kernels; (b) per UNet span, the sum
   of its kernels' time fits in the span's device window (first kernel start to last kernel end), and equals
   ``stepscope device``'s device time; (c) clock: the first kernel of each UNet span starts after the span's
   start, within the bound measured as the largest distance between a span and its own record_function range in
   the trace; (d) the record_function ranges (user_annotation, and gpu_user_annotation on CUDA) of the UNet,
   attention and scheduler spans are in the stored trace; (e) Euler's ``.nonzero()``/``.item()`` and the image's
   ``.cpu()`` are syncs with their Python lines and their wait on the GPU.
2. Idle gaps per stream attributed to host ops and spans; the same trace through HTA
   (``include_last_profiler_step=True``) gives the same idle time per stream and category within 1%.
3. FLOP/s per span against the measured matmul peak of the ops' dtype; the UNet's FLOPs per call against
   ``torch.utils.flop_counter.FlopCounterMode`` on the same UNet (meta tensors: no compute) within 5%.
4. ``stepscope bench sd``: synchronised timings, compile warm-up apart, peak CUDA memory, CIs, every SDPA
   backend measured or reported unavailable, none replaced (against an independent backend probe).
5. Tracing overhead (plain vs ``stepscope run``, default traces, 101 Hz, interleaved) as a ratio with its CI;
   torch.compile with the UNet forward traced vs not: graphs, graph breaks, speed.
6. The interpreter's tracing mechanism (``sys.monitoring`` on 3.12+) recorded the spans of a CUDA run.
mem. ``benchmarks/gpu_memory_check.py`` (issue 19), when present: its rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROGRAM = HERE / "gpu_program.py"
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
ATTN = "diffusers.models.attention_processor.*.__call__"
EULER = "diffusers.schedulers.scheduling_euler_discrete.EulerDiscreteScheduler.step"
PIPE = "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.StableDiffusionPipeline.__call__"
VAE = "diffusers.models.autoencoders.autoencoder_kl.AutoencoderKL.decode"
BACKENDS = ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math")
#: largest distance (ns) between a span and its own record_function range accepted as the clock bound
CLOCK_BOUND_NS = 300_000
HTA_TOLERANCE = 0.01
OVERHEAD_BOUND = 0.05
FLOP_TOLERANCE = 0.05

HTA_SCRIPT = r"""
import json, logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
df, _ = ta.get_idle_time_breakdown(visualize=False)
print("RESULT " + json.dumps(df[["stream", "idle_category", "idle_time"]].astype({"stream": int}).to_dict("records")))
"""


@dataclass
class Ctx:
    """What the checks share: the interpreter, folders, the configuration, the deadline, figures passed on."""

    python: str
    workdir: Path
    out: Path | None
    gpu: bool
    model: str
    size: int
    dtype: str
    steps: int
    deadline: float
    full_bench: bool = False
    hta_python: str | None = None
    rows: list = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def store(self) -> Path:
        return self.workdir / "store"

    @property
    def device(self) -> str:
        return "cuda" if self.gpu else "cpu"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def program(self, **kw) -> list[str]:
        args = {"model": self.model, "device": self.device, "dtype": self.dtype, "size": self.size,
                "steps": self.steps, "scheduler": "euler", **kw}
        out = [self.python, str(PROGRAM)]
        for k, v in args.items():
            out += [f"--{k}", str(v)]
        return out

    def stepscope(self, *args: str) -> list[str]:
        return [self.python, "-m", "stepscope", *args]


def row(ctx: Ctx, check: str, figure: str, bound: str, ok: bool | None, error: str | None = None) -> None:
    """Add a row: ok True PASS, False FAIL, None SKIP (the figure says why)."""
    r = {"check": check, "figure": figure, "bound": bound, "status": "SKIP" if ok is None else "PASS" if ok else "FAIL"}
    if error:
        r["error"] = error
    ctx.rows.append(r)
    write_outputs(ctx)


def run(cmd: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a command; raises RuntimeError with its last stderr line when it fails."""
    e = dict(os.environ, PYTHONWARNINGS="ignore", **(env or {}))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 10), env=e, cwd=str(ROOT))
    if p.returncode:
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        what = " ".join(a for a in cmd[1:4] if len(a) < 60)
        raise RuntimeError(f"`{what} ...` exit {p.returncode}: {lines[-1] if lines else ''}")
    return p


def result_line(text: str) -> dict:
    """The program's ``RESULT {json}`` line."""
    for ln in reversed(text.splitlines()):
        if ln.startswith("RESULT "):
            return json.loads(ln[len("RESULT "):])
    raise RuntimeError("no RESULT line in the program's output")


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def flops_s(x: float) -> str:
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.1f} GFLOP/s"


# ---------------------------------------------------------------------------------------------------------- 1


def traced_run(ctx: Ctx) -> None:
    """Record the pipeline with ``stepscope run --device-trace --syncs``; keep the run, its ``stepscope device
    --json`` document, the stored trace and the clock map in ``ctx.facts``."""
    from stepscope.device.kineto import load
    from stepscope.device.runview import clock_map
    from stepscope.store.db import DEVICE_TRACE, Store
    from stepscope.store.reader import load_run

    jf = ctx.workdir / "run.json"
    cmd = ctx.stepscope("run", "--device-trace", "--syncs", "-q", "--store", str(ctx.store), "--json-file", str(jf),
                        "--trace", UNET, "--trace", ATTN, "--trace", EULER, "--trace", PIPE, "--trace", VAE, "--",
                        *ctx.program(warmup=0, calls=1))
    t = time.monotonic()
    run(cmd, ctx.left())
    run_id = json.loads(jf.read_text())["run"]["run_id"]
    dev = json.loads(run(ctx.stepscope("device", run_id, "--json", "--store", str(ctx.store)), ctx.left()).stdout)["device"]
    if ctx.out is not None:
        txt = run(ctx.stepscope("device", run_id, "--store", str(ctx.store), "--top", "15"), ctx.left()).stdout
        (ctx.out / "stepscope_device.txt").write_text(txt)
    st = Store(ctx.store)
    data = load_run(st, run_id)
    trace_path = st.run_file(run_id, DEVICE_TRACE)
    trace = load(trace_path)
    ctx.facts.update(run_id=run_id, dev=dev, data=data, trace=trace, trace_path=trace_path, cmap=clock_map(trace),
                     run_s=time.monotonic() - t, env=st.get_run(run_id).env or {})
    st.close()


def _unet_spans(ctx: Ctx) -> list:
    """The UNet spans that lie inside the recorded trace, each with its Kineto thread and window."""
    import numpy as np

    data, trace, cmap = ctx.facts["data"], ctx.facts["trace"], ctx.facts["cmap"]
    lo, hi = int(trace.ts.min()), int(trace.end.max())
    out = []
    for s in sorted((s for s in data.spans if s.name == UNET), key=lambda s: s.start_ns):
        ktid = data.profile.native_at(s.thread_id, s.start_ns)
        a, b = int(cmap.to_trace(np.int64(s.start_ns))), int(cmap.to_trace(np.int64(s.end_ns)))
        if ktid is not None and a >= lo and b <= hi:
            out.append((s, ktid, a, b))
    return out


def _device_of_spans(ctx: Ctx) -> list[dict]:
    """Per UNet span: its device activity (launched from its thread inside its window) and host ops."""
    import numpy as np

    from stepscope.device.kineto import CAT

    trace = ctx.facts["trace"]
    dev = np.nonzero(np.isin(trace.cat, [CAT["kernel"], CAT["gpu_memcpy"], CAT["gpu_memset"]]))[0]
    rt = np.nonzero(trace.mask("cuda_runtime", "cuda_driver") & (trace.correlation >= 0))[0]
    launch = dict(zip(trace.correlation[rt].tolist(), zip(trace.ts[rt].tolist(), trace.tid[rt].tolist())))
    l_ts = np.array([launch.get(int(c), (-1, -1))[0] for c in trace.correlation[dev]], np.int64)
    l_tid = np.array([launch.get(int(c), (-1, -1))[1] for c in trace.correlation[dev]], np.int64)
    cpu = np.nonzero(trace.mask("cpu_op"))[0]
    out = []
    for s, ktid, a, b in _unet_spans(ctx):
        k = dev[(l_tid == ktid) & (l_ts >= a) & (l_ts < b)]
        ops = cpu[(trace.tid[cpu] == ktid) & (trace.ts[cpu] >= a) & (trace.ts[cpu] < b)]
        out.append({"span": s, "a": a, "b": b, "ktid": ktid, "kernels": k, "ops": ops,
                    "k_sum": int(trace.dur[k].sum()),
                    "k_first": int(trace.ts[k].min()) if len(k) else None,
                    "k_last": int(trace.end[k].max()) if len(k) else None,
                    "op_first": int(trace.ts[ops].min()) if len(ops) else None})
    return out


def check1(ctx: Ctx) -> None:
    import numpy as np

    traced_run(ctx)
    trace, cmap, dev = ctx.facts["trace"], ctx.facts["cmap"], ctx.facts["dev"]
    per = _device_of_spans(ctx)
    ctx.facts["unet_per"] = per
    n_all = sum(1 for s in ctx.facts["data"].spans if s.name == UNET)
    if not per:
        raise RuntimeError(f"no UNet span inside the recorded trace ({n_all} UNet spans in the run)")
    # (a) kernels
    if ctx.gpu:
        counts = [len(p["kernels"]) for p in per]
        row(ctx, "1a every UNet span has its kernels", f"{len(per)}/{n_all} UNet spans in the trace; kernels per span "
            f"min {min(counts)}, median {int(np.median(counts))}", "every span >= 1 kernel", min(counts) >= 1)
    else:
        counts = [len(p["ops"]) for p in per]
        row(ctx, "1a every UNet span has its kernels", f"CPU: no kernels; host ops per span min {min(counts)} "
            f"({len(per)} spans)", "every span >= 1 op (CPU dry run)", None if min(counts) >= 1 else False)
    # (b) kernel time within the device window, and equal to stepscope device's figure
    sd = next((s for s in dev["spans"] if s["name"] == UNET), None)
    if ctx.gpu:
        fits = [p["k_sum"] / max(p["k_last"] - p["k_first"], 1) for p in per if p["k_first"] is not None]
        total = sum(p["k_sum"] for p in per)
        theirs = sd["device_ns"] if sd else -1
        ok = bool(fits) and max(fits) <= 1.0 + 1e-6 and abs(total - theirs) <= max(1, 1e-3 * total)
        row(ctx, "1b UNet kernel time within the span's device window",
            f"kernel time / device window per span: {100 * min(fits):.1f}%..{100 * max(fits):.1f}%; total "
            f"{ms(total)} = stepscope device {ms(theirs)}", "<= 100% per span; totals equal (0.1%)", ok)
    else:
        row(ctx, "1b UNet kernel time within the span's device window", "CPU: no device activity",
            "<= 100% per span", None)
    # (c) clock: the span's own record_function range vs the span; first kernel (CPU: first op) after the start
    errs = []
    notes = np.nonzero(trace.mask("user_annotation"))[0]
    names = np.array([trace.name_of(i) == UNET for i in notes.tolist()], bool)
    mine = notes[names]
    for p in per:
        m = mine[trace.tid[mine] == p["ktid"]]
        if len(m):
            t_run = cmap.to_run(trace.ts[m])
            errs.append(int(np.min(np.abs(t_run - p["span"].start_ns))))
    # the clocks' offset: the median over the spans (one span whose thread was preempted between its range's start and
    # its own, by another process on a busy machine, is no clock error: a max read one such 3.7 ms gap as the bound)
    bound = int(np.median(errs)) if errs else None
    first = [p["k_first"] if ctx.gpu else p["op_first"] for p in per]
    lead = [int(cmap.to_run(np.int64(f))) - p["span"].start_ns for f, p in zip(first, per) if f is not None]
    what = "first kernel" if ctx.gpu else "first host op (CPU)"
    if bound is None or not lead:
        row(ctx, "1c spans and kernels on one clock", f"no {'mirrored range' if bound is None else what} found",
            f"bound <= {CLOCK_BOUND_NS / 1e3:.0f} us", False)
    else:
        ok = min(lead) >= -bound and bound <= CLOCK_BOUND_NS
        row(ctx, "1c spans and kernels on one clock",
            f"{what} - span start: min {min(lead) / 1e3:.1f} us, median {np.median(lead) / 1e3:.1f} us; measured bound "
            f"(span vs its own record_function range, median) {bound / 1e3:.1f} us over {len(errs)} spans",
            f"min >= -bound; bound <= {CLOCK_BOUND_NS / 1e3:.0f} us", ok)
    ctx.facts["clock_bound_ns"] = bound
    # (d) record_function (and GPU) ranges in the stored trace
    ann = {}
    for cat in ("user_annotation", "gpu_user_annotation"):
        idx = np.nonzero(trace.mask(cat))[0]
        nm = [trace.name_of(i) for i in idx.tolist()]
        ann[cat] = {"unet": sum(1 for x in nm if x == UNET), "attn": sum(1 for x in nm if "attention_processor" in x),
                    "euler": sum(1 for x in nm if x == EULER)}
    cpu_ok = ann["user_annotation"]["unet"] >= len(per) and ann["user_annotation"]["attn"] > 0 \
        and ann["user_annotation"]["euler"] > 0
    gpu_ok = ann["gpu_user_annotation"]["unet"] >= len(per) if ctx.gpu else True
    u, g = ann["user_annotation"], ann["gpu_user_annotation"]
    row(ctx, "1d record_function/NVTX ranges in the stored trace",
        f"host ranges: UNet {u['unet']}, attention {u['attn']}, Euler step {u['euler']}; GPU ranges: UNet {g['unet']}, "
        f"attention {g['attn']} (NVTX ranges go to Nsight, not to the Kineto file)",
        f"UNet ranges >= {len(per)} spans" + ("; on the GPU too" if ctx.gpu else ""), cpu_ok and gpu_ok)
    # (e) syncs: Euler's .nonzero()/.item(), the image's .cpu()
    sites = dev["sync_sites"]
    syncs = (dev.get("summary") or {}).get("syncs") or []

    def site(kind: str, filename: str):
        return next((s for s in sites if s["kind"] == kind and s["where"].startswith(filename)), None)

    def waited(filename: str, kinds: tuple[str, ...]) -> int:
        return max([s["cost_ns"] for s in syncs if (s.get("python") or "").startswith(filename) and s["kind"] in kinds]
                   or [-1])

    parts, ok = [], True
    for kind, fname, kineto_kinds in ((".nonzero()", "scheduling_euler_discrete.py", (".nonzero()",)),
                                      (".item()", "scheduling_euler_discrete.py", (".item()", "device-to-host copy",
                                                                                   "stream sync")),
                                      (".cpu()", "image_processor.py", ("device-to-host copy", "stream sync"))):
        s = site(kind, fname)
        if s is None:
            parts.append(f"{kind} at {fname}: not found")
            ok = False
            continue
        w = waited(fname, kineto_kinds)
        if ctx.gpu:
            ok = ok and w > 0
            parts.append(f"{kind} {s['where']} x{s['count']}: host {ms(s['total_ns'])}, GPU wait {ms(w) if w >= 0 else 'none'}")
        else:
            parts.append(f"{kind} {s['where']} x{s['count']}: host {ms(s['total_ns'])}"
                         + (f", trace op {w / 1e3:.0f} us" if w >= 0 else ", no wait on the CPU"))
    row(ctx, "1e syncs with their Python lines and wait", "; ".join(parts),
        "each found" + ("; GPU wait > 0 in the trace" if ctx.gpu else " (waits: GPU only)"), ok)


# ---------------------------------------------------------------------------------------------------------- 2


def hta_idle(ctx: Ctx, trace_path: Path) -> list[dict]:
    """HTA's idle time breakdown of a trace file (rows: stream, idle_category, idle_time in us), with HTA's ns
    rounding off (``HTA_DISABLE_NS_ROUNDING=1``): by default HTA's parser rounds every event's start up and its end
    down to whole us (``hta.common.trace_parser.round_down_time_stamps``), which widens every gap by up to 2 us.
    On ``shared/traces/v100_training_rank0.json.gz`` (6,004 gaps of ~1.7 us on stream 7) that read 12.1 ms of
    idle against 7.57 ms; with the rounding off HTA gives 7.57 ms, stepscope's figure, and categories within
    0.3% of the stream's idle."""
    with tempfile.TemporaryDirectory(dir=ctx.workdir) as d:
        shutil.copy(trace_path, Path(d) / "rank0.json.gz")
        p = run([ctx.hta_python or ctx.python, "-c", HTA_SCRIPT, d], ctx.left(), env={"HTA_DISABLE_NS_ROUNDING": "1"})
        return result_line(p.stdout)


def compare_idle(mine: list[dict], hta: list[dict]) -> tuple[float, list[str]]:
    """Largest difference per stream and category (share of HTA's stream idle total) and the figure's parts.
    ``mine``: ``stepscope device``'s streams (ns); ``hta``: HTA's rows (us)."""
    worst, parts = 0.0, []
    theirs: dict[int, dict[str, float]] = {}
    for r in hta:
        theirs.setdefault(int(r["stream"]), {})[r["idle_category"]] = float(r["idle_time"]) * 1e3
    for s in mine:
        t = theirs.get(int(s["stream"]))
        if t is None:
            worst = max(worst, 1.0 if s["idle_ns"] else 0.0)
            parts.append(f"stream {s['stream']}: not in HTA")
            continue
        tot = sum(t.values()) or 1.0
        d_tot = abs(s["idle_ns"] - sum(t.values())) / tot
        d_cat = max(abs(s[f"{c}_ns"] - t.get(c, 0.0)) / tot for c in ("host_wait", "kernel_wait", "other"))
        worst = max(worst, d_tot, d_cat)
        parts.append(f"stream {s['stream']}: idle {ms(s['idle_ns'])} vs HTA {ms(sum(t.values()))} "
                     f"(total {100 * d_tot:.2f}%, worst category {100 * d_cat:.2f}%)")
    return worst, parts


def check2(ctx: Ctx) -> None:
    dev = ctx.facts.get("dev")
    if dev is None:
        raise RuntimeError("needs check 1's run")
    summ = dev["summary"]
    streams, gaps = summ["streams"], summ["gaps"]
    if not streams:
        row(ctx, "2a idle gaps attributed to host ops and spans", "CPU: no device streams", "", None)
    else:
        top = gaps[:20]
        total = sum(g["end_ns"] - g["start_ns"] for g in top) or 1
        named = sum(g["end_ns"] - g["start_ns"] for g in top if g.get("host_op") or g.get("annotation"))
        s = max(streams, key=lambda x: x["busy_ns"])
        row(ctx, "2a idle gaps attributed to host ops and spans",
            f"stream {s['stream']}: idle {ms(s['idle_ns'])} of {ms(s['span_ns'])} (host wait {ms(s['host_wait_ns'])}, "
            f"kernel wait {ms(s['kernel_wait_ns'])}, other {ms(s['other_ns'])}); largest 20 gaps: "
            f"{100 * named / total:.0f}% of their time with a host op or span",
            ">= 90% of the largest gaps' time attributed", named / total >= 0.9)
    try:
        import importlib.util

        have = ctx.hta_python is not None or importlib.util.find_spec("hta") is not None
    except (ImportError, ValueError):
        have = False
    if not have:
        row(ctx, "2b HTA gives the same idle figures", "HolisticTraceAnalysis not installed here", "within 1%", None)
        return
    if streams:
        worst, parts = compare_idle(streams, hta_idle(ctx, ctx.facts["trace_path"]))
        row(ctx, "2b HTA gives the same idle figures", "; ".join(parts), f"within {100 * HTA_TOLERANCE:.0f}% per stream "
            "and category (of HTA's stream idle)", worst <= HTA_TOLERANCE)
        return
    # the CPU dry run: the comparison itself, on a recorded GPU trace
    ref = ROOT.parent / "shared" / "traces" / "v100_training_rank0.json.gz"  # (many us-short gaps: see hta_idle)
    if not ref.exists():
        row(ctx, "2b HTA gives the same idle figures", "CPU: no device streams", "within 1%", None)
        return
    from stepscope.device.analysis import idle_breakdown
    from stepscope.device.kineto import load

    mine = [{"stream": s.stream, "idle_ns": s.idle_ns, "host_wait_ns": s.host_wait_ns, "kernel_wait_ns": s.kernel_wait_ns,
             "other_ns": s.other_ns} for s in idle_breakdown(load(ref))[0]]
    worst, parts = compare_idle(mine, hta_idle(ctx, ref))
    row(ctx, "2b HTA gives the same idle figures", f"CPU dry run, on {ref.name}: " + "; ".join(parts),
        "within 1% (informative on the CPU)", None)


# ---------------------------------------------------------------------------------------------------------- 3


def unet_flops_per_call(model: str, size: int, dtype: str) -> float:
    """FLOPs of one UNet forward (classifier-free guidance: batch 2) by ``torch.utils.flop_counter`` on meta
    tensors: the same UNet configuration as the pipeline, no compute."""
    import torch
    from diffusers.models.attention_processor import AttnProcessor2_0
    from torch.utils.flop_counter import FlopCounterMode

    from stepscope.pipelines.sd import _components

    with torch.device("meta"):
        unet, _, vae, _ = _components(model)
        unet = unet.to(getattr(torch, dtype))
    unet.set_attn_processor(AttnProcessor2_0())
    lat = size // 2 ** (len(vae.config.block_out_channels) - 1)  # the pipeline's vae_scale_factor
    dt = getattr(torch, dtype)
    x = torch.empty(2, unet.config.in_channels, lat, lat, device="meta", dtype=dt)
    enc = torch.empty(2, 77, unet.config.cross_attention_dim, device="meta", dtype=dt)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        unet(x, torch.tensor(999, device="meta"), encoder_hidden_states=enc)
    return float(fc.get_total_flops())


def check3(ctx: Ctx) -> None:
    from stepscope.output.terminal.device import share

    dev = ctx.facts.get("dev")
    if dev is None:
        raise RuntimeError("needs check 1's run")
    peak = dev.get("peak") or {}
    peaks = peak.get("peaks") or {peak.get("dtype"): peak.get("peak_flops")}
    spans = {s["name"]: s for s in dev["spans"]}
    u = spans.get(UNET)
    if u is None or not u["flops"]:
        raise RuntimeError("stepscope device reports no FLOPs for the UNet")
    want = ctx.dtype
    p_dt = peaks.get(want)
    ok_peak = p_dt is not None and u["peak_dtype"] == want and u["of_peak"] is not None and 0 < u["of_peak"] <= 1.0
    per_span = []
    for name, s in spans.items():
        if s["flops"] and s["recorded_ns"]:
            short = name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1]
            per_span.append(f"{short}: {flops_s(s['achieved_flops_s'])}"
                            + (f" ({share(s['of_peak'])} of {s['peak_dtype']} peak" if s["of_peak"] is not None else "")
                            + (f", {share(s.get('device_of_peak'))} on device)" if s.get("device_of_peak")
                               else ")" if s["of_peak"] is not None else ""))
    row(ctx, "3a achieved FLOP/s vs measured peak, per span",
        f"peak ({peak.get('name')}): " + ", ".join(f"{d} {flops_s(v)}" for d, v in peaks.items() if v)
        + "; " + "; ".join(per_span),
        f"UNet: share of the {want} peak in (0, 100%]", ok_peak)
    mine = u["flops"] / max(u["recorded"], 1)
    ref = unet_flops_per_call(ctx.model, ctx.size, ctx.dtype)
    d = abs(mine - ref) / ref
    row(ctx, "3b UNet FLOPs per call vs torch's flop counter", f"stepscope {mine / 1e9:.1f} GFLOP/call, "
        f"FlopCounterMode {ref / 1e9:.1f} GFLOP (diff {100 * d:.1f}%)", f"within {100 * FLOP_TOLERANCE:.0f}%",
        d <= FLOP_TOLERANCE)


# ---------------------------------------------------------------------------------------------------------- 4


def sdpa_probe(dtype: str, device: str, head_dims=(40, 80, 160), seq=(4096, 77)) -> dict[str, str | None]:
    """Independently of stepscope: can each SDPA backend run SD1.5's attention shapes here? backend -> None
    (it can) or the reason it cannot."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
             "sdpa-cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None), "sdpa-math": SDPBackend.MATH}
    out: dict[str, str | None] = {}
    dt = getattr(torch, dtype)
    for name, b in which.items():
        if b is None:
            out[name] = "not in this torch"
            continue
        try:
            with sdpa_kernel([b]), torch.no_grad():
                for hd in head_dims:
                    q = torch.randn(2, 8, 256, hd, device=device, dtype=dt)
                    for s in seq:
                        kv = torch.randn(2, 8, s, hd, device=device, dtype=dt)
                        torch.nn.functional.scaled_dot_product_attention(q, kv, kv)
            out[name] = None
        except RuntimeError as e:
            out[name] = str(e).splitlines()[0][:120]
    return out


def bench(ctx: Ctx, **opts) -> dict:
    args = ["bench", "sd", "--json", "--store", str(ctx.store), "--model", ctx.model, "--dtype", ctx.dtype,
            "--size", str(ctx.size)]
    for k, v in opts.items():
        args += [f"--{k}", str(v)]
    p = run(ctx.stepscope(*args), ctx.left())
    doc = json.loads(p.stdout)
    if ctx.out is not None:
        txt = run(ctx.stepscope("bench", "show", doc["bench"]["id"], "--store", str(ctx.store)), ctx.left()).stdout
        with open(ctx.out / "stepscope_bench.txt", "a") as f:
            f.write(txt + "\n")
    return doc


def check4(ctx: Ctx) -> None:
    compile_modes = "off,default" if ctx.gpu else "off,eager"
    if ctx.full_bench:
        main = dict(attention="classic,sdpa", compile=compile_modes, batch="1,4", steps=20, repeats=5, warmup=1)
    elif ctx.gpu:
        main = dict(attention="classic,sdpa", compile=compile_modes, batch="1", steps=20, repeats=3, warmup=1)
    else:
        main = dict(attention="classic,sdpa", compile=compile_modes, batch="1", steps=ctx.steps, repeats=2, warmup=1)
    doc = bench(ctx, **main)
    v, b = doc["verdict"], doc["bench"]
    rows = v["rows"]
    env = b.get("env") or {}
    budget = "" if ctx.full_bench else f" (budget: batch {main['batch']}, {main['repeats']} repeats; --full-bench: the issue's)"
    timed_ok = all(r["times_s"] and len(r["times_s"]) == main["repeats"] for r in rows)
    sync_note = ""
    sync_ok = env.get("device") == ctx.device
    base = next((r for r in rows if r["config"]["attention"] == "sdpa" and r["config"]["compile"] == "off"
                 and r["config"]["batch"] == 1), None)
    per = ctx.facts.get("unet_per")
    if ctx.gpu and per and base and base["step_median_s"]:
        unet_dev = sum(p["k_sum"] for p in per) / len(per) / 1e9
        sync_ok = sync_ok and base["step_median_s"] >= 0.9 * unet_dev
        sync_note = f"; sdpa step {1e3 * base['step_median_s']:.1f} ms >= UNet device time {1e3 * unet_dev:.1f} ms/call"
    desc = ", ".join(f"{r['label']} {r['stats']['median']:.3f} s [{r['stats']['ci_low']:.3f}, {r['stats']['ci_high']:.3f}]"
                     for r in rows if r["stats"])
    row(ctx, "4a bench timings (synchronised), CIs", f"{env.get('device_name', env.get('device'))}: {desc}{sync_note}{budget}",
        "every config timed; device " + ctx.device + (" ; step time >= UNet device time" if ctx.gpu else ""),
        timed_ok and sync_ok and all(r["stats"]["ci_low"] <= r["stats"]["median"] <= r["stats"]["ci_high"]
                                     for r in rows if r["stats"]))
    comp = [r for r in rows if r["config"]["compile"] != "off"]
    eager = [r for r in rows if r["config"]["compile"] == "off"]
    cw = [r["first_warmup_s"] for r in comp if r["first_warmup_s"]]
    ew = [r["first_warmup_s"] for r in eager if r["first_warmup_s"]]
    ok = bool(cw) and bool(ew) and all(r["first_warmup_s"] > (r["stats"]["median"] if r["stats"] else 0) for r in comp)
    row(ctx, "4b compile warm-up kept apart", f"first warm-up: compiled {', '.join(f'{x:.1f}' for x in cw)} s, eager "
        f"{', '.join(f'{x:.1f}' for x in ew)} s (not in the timings)", "compiled warm-up > its timed runs", ok)
    mem = [r["peak_bytes"] for r in rows]
    floor = 1.5e9 if (ctx.gpu and ctx.model == "sd15") else 1
    row(ctx, "4c peak memory per configuration", ", ".join(f"{r['label']} {r['peak_bytes'] / 2**30:.2f} GiB"
                                                           for r in rows if r["peak_bytes"]),
        ("CUDA max_memory_allocated >= the fp16 weights (1.5 GB)" if ctx.gpu else "> 0 (CPU: peak RSS)"),
        all(m and m >= floor for m in mem))
    gains = []
    for r in rows:
        if r["change"] and not r["is_baseline"]:
            c = r["change"]
            gains.append(f"{r['label']}: {100 * c['change']:+.0f}% [{100 * c['ci_low']:+.0f}, {100 * c['ci_high']:+.0f}]")
    row(ctx, "4d against the baseline (seed: SDPA, compile -25..-50% on A100)", "; ".join(gains) or "-",
        "each change has a CI", bool(gains) and all(r["change"] for r in rows if not r["is_baseline"]))
    # every SDPA backend: measured, or reported unavailable; never replaced
    title = "4e every SDPA backend measured, none replaced"
    need = 90 if ctx.gpu else 20  # the model's load and 4 backends' warm-up and timed runs (H100: ~60 s)
    if ctx.left() < need:
        row(ctx, f"{title} (not run)", f"{ctx.left():.0f} s left of the budget; needs ~{need} s", "", None)
        return
    probe = sdpa_probe(ctx.dtype, ctx.device)
    try:
        doc = bench(ctx, attention=",".join(BACKENDS), compile="off", batch="1", steps=ctx.steps if not ctx.gpu else 10,
                    repeats=2 if not ctx.gpu else 3, warmup=1)
    except subprocess.TimeoutExpired:
        row(ctx, f"{title} (not run)", "the budget ran out while it ran (--budget-s)", "", None)
        return
    parts, ok = [], True
    for r in doc["verdict"]["rows"]:
        name = r["config"]["attention"]
        can = probe.get(name) is None
        ran = bool(r["times_s"])
        if ran:
            parts.append(f"{name} {r['stats']['median']:.3f} s")
        else:
            parts.append(f"{name} unavailable ({(r['problem'] or '?')[:80]})")
        if ran != can:
            ok = False
            parts[-1] += f" [probe: {'runs' if can else probe.get(name)}]"
    row(ctx, title, "; ".join(parts),
        "timed iff the backend runs SD's shapes here (independent probe)", ok)


# ---------------------------------------------------------------------------------------------------------- 5


def check5(ctx: Ctx) -> None:
    from stepscope.bench.stats import compare
    from stepscope.pipelines.sd import demo_traces

    pairs, calls = (3, 2) if ctx.gpu else (2, 2)
    prog = ctx.program(warmup=1, calls=calls)
    traced = ctx.stepscope("run", "-q", "--hz", "101", "--store", str(ctx.workdir / "overhead"))
    for t in demo_traces("euler"):
        traced += ["--trace", t]
    traced += ["--", *prog]
    plain_t, traced_t = [], []
    for _ in range(pairs):
        plain_t += result_line(run(prog, ctx.left()).stdout)["calls_s"]
        traced_t += result_line(run(traced, ctx.left()).stdout)["calls_s"]
    c = compare(traced_t, plain_t)
    row(ctx, "5a tracing overhead (default traces, 101 Hz)",
        f"pipeline call {sorted(plain_t)[len(plain_t) // 2]:.3f} s plain vs {sorted(traced_t)[len(traced_t) // 2]:.3f} s "
        f"traced: {100 * c.change:+.1f}% [CI {100 * c.ci_low:+.1f}, {100 * c.ci_high:+.1f}] ({pairs} interleaved pairs "
        f"x {calls} calls)", f"median overhead <= {100 * OVERHEAD_BOUND:.0f}%" + ("" if ctx.gpu else " (GPU; CPU: shown)"),
        c.change <= OVERHEAD_BOUND if ctx.gpu else None)
    backend = "inductor" if ctx.gpu else "eager"
    cprog = ctx.program(warmup=1, calls=3, compile=backend)
    plain = result_line(run(cprog, ctx.left()).stdout)
    tr = result_line(run(ctx.stepscope("run", "-q", "--hz", "101", "--store", str(ctx.workdir / "compile"), "--trace", UNET,
                                       "--", *cprog), ctx.left()).stdout)
    cc = compare(tr["calls_s"], plain["calls_s"])
    same = plain["graphs"] == tr["graphs"] and plain["graph_breaks"] == tr["graph_breaks"]
    row(ctx, f"5b torch.compile ({backend}) with the UNet forward traced",
        f"graphs {plain['graphs']} vs {tr['graphs']} traced, graph breaks {plain['graph_breaks']} vs {tr['graph_breaks']}; "
        f"median call {sorted(plain['calls_s'])[1]:.3f} s vs {sorted(tr['calls_s'])[1]:.3f} s ({100 * cc.change:+.1f}% "
        f"[CI {100 * cc.ci_low:+.1f}, {100 * cc.ci_high:+.1f}])",
        "same graphs and breaks; speed within 10%" + ("" if ctx.gpu else " (speed: GPU only)"),
        same and (abs(cc.change) <= 0.10 or not ctx.gpu))


# ---------------------------------------------------------------------------------------------------------- 6


def check6(ctx: Ctx) -> None:
    env = ctx.facts.get("env")
    if env is None:
        raise RuntimeError("needs check 1's run")
    py = env.get("python", "?")
    mech = env.get("tracing")
    n = sum(1 for s in ctx.facts["data"].spans if s.name == UNET)
    cuda = bool((env.get("torch") or {}).get("cuda")) if isinstance(env.get("torch"), dict) else ctx.gpu
    fig = (f"Python {py}, mechanism {mech}, {n} UNet spans, torch {env.get('torch_version') or (env.get('torch') or {})}"
           if not isinstance(env.get("torch"), dict) else f"Python {py}, mechanism {mech}, {n} UNet spans")
    major, minor = (int(x) for x in py.split(".")[:2])
    if (major, minor) < (3, 12):
        row(ctx, "6 Python 3.12 tracing mechanism with torch and CUDA", fig + " (this interpreter is older than 3.12)",
            "3.12+: sys.monitoring", None if not ctx.gpu else False)
        return
    row(ctx, "6 Python 3.12 tracing mechanism with torch and CUDA", fig,
        "sys.monitoring; UNet spans recorded" + (" with kernels" if ctx.gpu else ""),
        mech == "monitoring" and n > 0 and (not ctx.gpu or bool(ctx.facts.get("unet_per"))) and (cuda or not ctx.gpu))


# ---------------------------------------------------------------------------------------------------------- mem


def check_mem(ctx: Ctx) -> None:
    try:
        import gpu_memory_check  # issue 19's rows, where that module exists
    except ImportError:
        return
    for r in gpu_memory_check.run_checks(ctx.workdir, ctx.python):
        row(ctx, "mem " + str(r.get("check")), str(r.get("figure")), str(r.get("bound", "")), r.get("ok"))


# ---------------------------------------------------------------------------------------------------------- table

CHECKS = [("1", check1, 60), ("2", check2, 30), ("3", check3, 10), ("6", check6, 0), ("4", check4, 330),
          ("5", check5, 90), ("mem", check_mem, 30)]


def table_text(rows: list[dict]) -> str:
    """The one table, as plain text (columns: check, figure, bound, status; long figures fold)."""
    import textwrap

    w = (44, 78, 34, 6)
    head = ("check", "figure", "bound", "status")
    lines = ["  ".join(h.ljust(n) for h, n in zip(head, w)), "  ".join("-" * n for n in w)]
    for r in rows:
        figure = r["figure"] + (f" | error: {r['error']}" if r.get("error") else "")
        cols = [textwrap.wrap(r["check"], w[0]) or [""], textwrap.wrap(figure, w[1]) or [""],
                textwrap.wrap(r["bound"], w[2]) or [""], [r["status"]]]
        for k in range(max(len(c) for c in cols)):
            lines.append("  ".join((c[k] if k < len(c) else "").ljust(n) for c, n in zip(cols, w)).rstrip())
    return "\n".join(lines)


def table_md(rows: list[dict], title: str) -> str:
    out = [f"### {title}", "", "| check | figure | bound | status |", "|---|---|---|---|"]
    for r in rows:
        fig = r["figure"] + (f" — error: {r['error']}" if r.get("error") else "")
        out.append("| " + " | ".join(x.replace("|", "/") for x in (r["check"], fig, r["bound"], r["status"])) + " |")
    return "\n".join(out) + "\n"


def write_outputs(ctx: Ctx) -> None:
    if ctx.out is None:
        return
    title = ctx.facts.get("title", "gpu-check")
    (ctx.out / "gpu_check.json").write_text(json.dumps({"title": title, "rows": ctx.rows}, indent=1) + "\n")
    (ctx.out / "gpu_check.md").write_text(table_md(ctx.rows, title))


def main(args) -> int:
    import torch

    t0 = time.monotonic()
    gpu = not args.cpu_dry_run
    if gpu and not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU here: torch.cuda.is_available() is False; nothing was checked", flush=True)
        return 2
    budget = args.budget_s if args.budget_s is not None else (540.0 if gpu else 900.0)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="stepscope-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(python=sys.executable, workdir=work, out=out, gpu=gpu, model="sd15" if gpu else "tiny",
              size=512 if gpu else 64, dtype="float16" if gpu else "float32", steps=10 if gpu else 3,
              deadline=t0 + budget, full_bench=args.full_bench, hta_python=args.hta_python)
    name = torch.cuda.get_device_name() if gpu else "CPU dry run (development only; CUDA checks SKIP)"
    ctx.facts["title"] = (f"gpu-check on {name}: {ctx.model} {ctx.size} px {ctx.dtype}, torch {torch.__version__}, "
                          f"Python {sys.version.split()[0]}")
    print(ctx.facts["title"], flush=True)
    wanted = [c.strip() for c in args.checks.split(",") if c.strip()]
    if any(w in ("2", "3", "6") for w in wanted) and "1" not in wanted:
        wanted.insert(0, "1")  # their figures come from check 1's run
    for key, fn, need_s in CHECKS:
        if key not in wanted:
            continue
        if ctx.left() < need_s:
            row(ctx, f"{key} (not run)", f"{ctx.left():.0f} s left of the {budget:.0f} s budget; needs ~{need_s} s",
                "", None)
            continue
        t = time.monotonic()
        n = len(ctx.rows)
        try:
            fn(ctx)
        except Exception as e:  # one failing check still lets the others run
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            row(ctx, f"{key} (raised)", f"{type(e).__name__}", "", False, error=last[:400])
        print(f"gpu-check: check {key} took {time.monotonic() - t:.0f} s ({len(ctx.rows) - n} rows)", flush=True)
    print()
    print(ctx.facts["title"])
    print(table_text(ctx.rows))
    fails = sum(r["status"] == "FAIL" for r in ctx.rows)
    print(f"\n{sum(r['status'] == 'PASS' for r in ctx.rows)} passed, {fails} failed, "
          f"{sum(r['status'] == 'SKIP' for r in ctx.rows)} skipped in {time.monotonic() - t0:.0f} s"
          + (f"; tables in {out}" if out else ""))
    write_outputs(ctx)
    return 1 if fails else 0
