"""The device's measured matmul peak (FLOP/s), timed in the recording process at the end of a device trace
(``capture.DeviceCapture``); ``stepscope.device.flops`` divides a span's FLOPs by it. Stdlib only at import; torch is the
program's own, imported when the probe runs."""

from __future__ import annotations

import time

#: dtypes whose peak is measured on a GPU (the CPU: float32 only)
GPU_DTYPES = ("float32", "float16", "bfloat16")


def probe_peaks(device: str = "cpu") -> dict[str, float]:
    """Measured dense matmul peak (FLOP/s) per dtype name: float32 on the CPU (2048^3); float32, float16 and
    bfloat16 on a GPU (8192^3, large enough that launch overhead is <1% of a matmul), each by ``probe_peak``."""
    if not device.startswith("cuda"):
        return {"float32": probe_peak(device)}
    return {d: probe_peak(device, n=8192, repeats=10, dtype=d) for d in GPU_DTYPES}


def probe_peak(device: str = "cpu", n: int = 2048, repeats: int = 5, dtype: str = "float32") -> float:
    """Measured matmul throughput (FLOP/s) of ``device``: the best of ``repeats`` n x n x n matmuls
    (2 n^3 FLOPs each) after one warm-up."""
    import torch

    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device=device, dtype=dt)
    b = torch.randn(n, n, device=device, dtype=dt)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    (a @ b).sum()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best
