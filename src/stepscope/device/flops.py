"""FLOPs per span and achieved FLOP/s against the device's measured peak.

FLOPs are computed from the device trace's recorded input shapes (``record_shapes``: ``Input Dims`` and
``Concrete Inputs``), with the formulas of ``torch.utils.flop_counter`` (a multiply-add counts 2):

- ``mm``/``addmm`` [M,K]x[K,N]: 2MKN; ``bmm``/``baddbmm`` [B,M,K]x[B,K,N]: 2BMKN;
- ``convolution`` input [N,Cin,H,W], weight [Cout,Cin/g,kh,kw]: 2 N Cout Hout Wout (Cin/g) kh kw, with
  Hout/Wout from stride, padding and dilation;
- ``scaled_dot_product_attention`` q [B,H,L,E], k [B,H,S,E], v [B,H,S,Ev]: 2BHLSE + 2BHLSEv.

An op nested in another counted op on the same thread (SDPA's math-backend bmms, a convolution's
backend call) is not counted twice. A span's FLOPs are those of the ops that started inside its
windows; achieved FLOP/s = FLOPs / span time. The peak is measured, not looked up: ``record.device.peaks``
times a large matmul on the run's device in the recording process.
"""

from __future__ import annotations

import ast
import math

import numpy as np

FLOP_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution",
            "aten::scaled_dot_product_attention")


def _dims(args: dict) -> list:
    d = args.get("Input Dims") or []
    return d if isinstance(d, list) else []


def _concrete(args: dict, i: int):
    c = args.get("Concrete Inputs") or []
    if i >= len(c) or c[i] in ("", None):
        return None
    try:
        return ast.literal_eval(c[i]) if isinstance(c[i], str) else c[i]
    except (ValueError, SyntaxError):
        return None


def op_flops(name: str, args: dict) -> float:
    """FLOPs of one op event from its recorded shapes (0 when the shapes are missing or unknown)."""
    d = _dims(args)
    try:
        if name == "aten::mm" and len(d) >= 2:
            (m, k), (_, n) = d[0][-2:], d[1][-2:]
            return 2.0 * m * k * n
        if name == "aten::addmm" and len(d) >= 3:
            (m, k), (_, n) = d[1][-2:], d[2][-2:]
            return 2.0 * m * k * n
        if name in ("aten::bmm", "aten::baddbmm") and len(d) >= 2:
            a, b = (d[0], d[1]) if name == "aten::bmm" else (d[1], d[2])
            return 2.0 * math.prod(a[:-2]) * a[-2] * a[-1] * b[-1]
        if name == "aten::convolution" and len(d) >= 2 and len(d[0]) >= 3:
            x, w = d[0], d[1]
            spatial = x[2:]
            k = w[2:]
            stride = _concrete(args, 3) or [1] * len(k)
            pad = _concrete(args, 4) or [0] * len(k)
            dil = _concrete(args, 5) or [1] * len(k)
            transposed = bool(_concrete(args, 6))
            out = []
            for j, size in enumerate(spatial):
                s, p, dl = stride[j % len(stride)], pad[j % len(pad)], dil[j % len(dil)]
                out.append(size * s if transposed else (size + 2 * p - dl * (k[j] - 1) - 1) // s + 1)
            return 2.0 * x[0] * w[0] * math.prod(out) * w[1] * math.prod(k)
        if name == "aten::scaled_dot_product_attention" and len(d) >= 3:
            q, kk, v = d[0], d[1], d[2]
            b = math.prod(q[:-2])
            return 2.0 * b * q[-2] * kk[-2] * q[-1] + 2.0 * b * q[-2] * kk[-2] * v[-1]
    except (TypeError, ValueError, IndexError):
        return 0.0
    return 0.0


#: Kineto's ``Input type`` names -> torch dtype names
_TYPES = {"c10::Half": "float16", "c10::BFloat16": "bfloat16", "float": "float32", "double": "float64",
          "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2"}


def op_dtype(args: dict) -> str | None:
    """The dtype (torch name: float16, bfloat16, float32...) of an op's first floating-point tensor input, from
    its recorded ``Input type`` (None when not recorded or not floating point)."""
    types = args.get("Input type") or []
    if not isinstance(types, list):
        return None
    for t in types:
        d = _TYPES.get(t) if isinstance(t, str) else None
        if d is not None:
            return d
    return None


def trace_flops(trace) -> np.ndarray:
    """FLOPs per event of a ``KinetoTrace`` (float64, 0 for events not counted; see the module doc)."""
    out = np.zeros(len(trace))
    wanted = {i for i, n in enumerate(trace.names) if n in FLOP_OPS}
    if not wanted:
        return out
    idx = np.nonzero(np.isin(trace.name, list(wanted)))[0]
    for tid in np.unique(trace.tid[idx]).tolist():
        sel = idx[trace.tid[idx] == tid]
        sel = sel[np.lexsort((-trace.dur[sel], trace.ts[sel]))]
        counted_end = -1
        for i in sel.tolist():
            if trace.ts[i] < counted_end:
                continue  # inside an op already counted
            out[i] = op_flops(trace.names[trace.name[i]], trace.args[i])
            counted_end = int(trace.ts[i] + trace.dur[i])
    return out
