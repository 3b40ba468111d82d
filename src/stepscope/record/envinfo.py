"""The facts of the environment a run was recorded in (``environment``): Python, platform, torch's build and flags,
library versions, speed-relevant environment variables, the machine's load, the main thread's scheduling, and the
pipeline facts of ``steps.workfacts``; read into the run's ``env`` for ``diff`` (``analysis.envfacts``). Stdlib
only; reads ``sys.modules`` only (imports nothing, never initialises CUDA)."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from .steps import workfacts

#: libraries whose version can change a pipeline's speed (read from sys.modules only)
LIBRARIES = ("diffusers", "transformers", "accelerate", "xformers", "numpy", "safetensors", "triton", "peft")
#: environment variables that change how torch runs (thread pools, devices, allocator, compile)
ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
            "PYTORCH_CUDA_ALLOC_CONF", "TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE", "PYTORCH_ENABLE_MPS_FALLBACK",
            "ATTN_PRECISION", "XFORMERS_DISABLED")


def _torch_facts(torch, env: dict[str, Any]) -> None:
    """Build, device, thread pools, math flags, SDPA backends, torch.compile (never initialises CUDA)."""
    env["torch"] = torch.__version__
    env["cuda"] = torch.version.cuda
    if getattr(torch.version, "hip", None):
        env["hip"] = torch.version.hip
    env["threads"] = torch.get_num_threads()
    env["interop_threads"] = torch.get_num_interop_threads()
    if torch.cuda.is_initialized():
        env["device"] = torch.cuda.get_device_name()
        env["cudnn"] = torch.backends.cudnn.version()
    flags: dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    b = torch.backends
    for key, fn in (("sdpa_flash", "flash_sdp_enabled"), ("sdpa_mem_efficient", "mem_efficient_sdp_enabled"),
                    ("sdpa_math", "math_sdp_enabled"), ("sdpa_cudnn", "cudnn_sdp_enabled")):
        f = getattr(b.cuda, fn, None)
        if f is not None:
            flags[key] = bool(f())
    flags["cuda_matmul_tf32"] = bool(b.cuda.matmul.allow_tf32)
    flags["cudnn_tf32"] = bool(b.cudnn.allow_tf32)
    flags["cudnn_benchmark"] = bool(b.cudnn.benchmark)
    flags["mkldnn"] = bool(b.mkldnn.is_available())
    env["torch_flags"] = flags
    dynamo = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo, "counters", None)
    if counters is not None:  # torch.compile was imported; how much it compiled
        frames = counters.get("frames", {})
        env["compile"] = {"frames_ok": int(frames.get("ok", 0)), "frames_total": int(frames.get("total", 0)),
                          "graph_breaks": int(sum(counters.get("graph_break", {}).values()))}


def environment() -> dict[str, Any]:
    """Python/platform facts; torch's (build, CUDA, device, thread pools, math and SDPA flags, compile
    counters) when the program imported torch; versions of ``LIBRARIES`` it imported; ``ENV_VARS`` that are
    set; ``loadavg``: the machine's 1-minute load average; ``sched``: the main thread's ``[ns on a CPU, ns
    waiting for one, when]`` and the machine's and the process's CPU time (Linux; ``workfacts.read_schedstat``); ``work``: the pipeline/denoiser facts noted by ``steps.workfacts`` (arguments, weights' device and
    dtype, attention processors). Reads ``sys.modules`` only: nothing is imported, CUDA is not initialised."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            _torch_facts(torch, env)
        except Exception:
            pass
    for name in LIBRARIES:
        mod = sys.modules.get(name)
        if mod is not None:
            env[name] = getattr(mod, "__version__", None)
    try:  # how busy the machine was (1-minute load average): another program competing for the cores
        env["loadavg"] = round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        pass
    sched = workfacts.read_schedstat()
    if sched is not None:  # the main thread's time on a CPU and waiting for one (ns)
        env["sched"] = sched
    env_vars = {k: os.environ[k] for k in ENV_VARS if k in os.environ}
    if env_vars:
        env["env_vars"] = env_vars
    work = workfacts.snapshot()
    if work:
        env["work"] = work
    return env
