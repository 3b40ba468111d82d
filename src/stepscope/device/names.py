"""Short labels for device kernel names, as tables show them (the full name stays in every file and tooltip).

A CUDA kernel's Kineto name is its demangled C++ signature: ``void at::native::elementwise_kernel<128, 4,
at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::Half> >(...)::{lambda(int)#1}>(int, ...)``,
often 300 to 5,000 characters. Like Nsight Compute's ``--kernel-name-base function`` the label drops the return
type and the parameter list; unlike it, it keeps what tells two instances of one template apart: short template
arguments as they are (``RowwiseMomentsCUDAKernel<c10::Half>``; up to twice as long where they hold only numbers and
types), and from long ones the first names that are not
types or namespaces (``elementwise_kernel<…CUDAFunctor_add…>``, ``vectorized_elementwise_kernel<…silu_kernel…>``).
Names that are not C++ signatures (``Memset (Device)``, cuDNN's and cuBLAS's generated names) are kept as they are.
"""

from __future__ import annotations

import re

_IDENT = re.compile(r"[A-Za-z_]\w*")
#: types, namespaces and wrappers that say nothing of what a kernel computes
_NOISE = frozenset("""
at native c10 std detail cuda templates internal binary_internal anonymous namespace cub thrust
Half BFloat16 float double int long unsigned signed char bool short void const true false u ul ull
lambda operator Array array OpaqueType TensorIteratorBase TensorIterator CUDAGeneratorImpl curandStatePhilox4_32_10
gpu_kernel_impl_nocast gpu_kernel_impl gpu_kernel BinaryFunctor BUnaryFunctor UnaryFunctor func_wrapper_t ReduceOp
Scalar ClampLimits OffsetCalculator TrivialOffsetCalculator LoadWithCast StoreWithCast LoadWithoutCast
StoreWithoutCast memory Params complex float2 float4 half __half __nv_bfloat16 nv_bfloat16 size_t
""".split())


def _cut_params(s: str) -> str:
    """``s`` up to its parameter list: the first ``(`` outside template brackets right after a name or ``>``."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and i and (s[i - 1].isalnum() or s[i - 1] in "_>"):
            return s[:i]
    return s


def kernel_label(name: str, keep: int = 32, hints: int = 2) -> str:
    """The label of kernel ``name`` for a table cell (see the module's docstring).

    ``keep``: template arguments up to this many characters are shown as they are; ``hints``: how many names a
    longer argument list is reduced to. Never raises; an empty name stays empty."""
    s = name.strip()
    if "(" not in s and "<" not in s:
        return s
    if s.startswith("void "):
        s = s[5:]
    s = _cut_params(s.replace("(anonymous namespace)::", "")).rstrip()
    i = s.find("<")
    if i <= 0:
        return s or name
    args = s[i + 1:s.rfind(">")] if s.endswith(">") else s[i + 1:]
    if len(args) <= keep:
        return s
    base = s[:i].rsplit("::", 1)[-1]
    seen: list[str] = []
    for m in _IDENT.finditer(args):
        w = m.group()
        if w in _NOISE or w == base or w in seen or (len(w) <= 2 and not w.isupper()):
            continue
        seen.append(w)
        if len(seen) == hints:
            break
    if not seen and len(args) <= 2 * keep:  # only numbers and types: they are what tells the instances apart
        return s
    return s[:i] + ("<…" + ", ".join(seen) + "…>" if seen else "<…>")
