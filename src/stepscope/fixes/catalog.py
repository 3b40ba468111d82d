"""Each fix of ``stepscope try``: whether it applies to a pipeline, and its application (inside the child
process, at the program's first pipeline call; torch and diffusers are imported here, never by the core).

``check(name, site)`` returns None when the fix applies, else the reason in words ("already on SDPA: ...",
"no CPU offload hook on the components"); ``apply(name, site)`` changes the program's pipeline in place and
returns what it did, raising any exception of torch/diffusers as it comes (the child reports it as the
configuration's failure). ``Site`` is the pipeline and its call's arguments.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

_SDPA_BACKENDS = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-efficient": "EFFICIENT_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION"}
_CLASSIC = ("AttnProcessor", "AttnAddedKVProcessor", "SlicedAttnProcessor", "XFormersAttnProcessor")


@dataclass
class Site:
    """The pipeline of the program's first call (``pipe``), its device type (``"cpu"``, ``"cuda"``...), the
    call's arguments by name (``kwargs``), the compile mode, the SDPA backend chosen for the calls and what
    each applied fix did (``applied``)."""

    pipe: object
    device: str
    kwargs: dict
    compile_mode: str = "default"
    backend: object = None
    applied: dict = field(default_factory=dict)  # fix -> what was done

    @property
    def denoiser_name(self) -> str | None:
        """The pipeline's attribute holding the denoiser (``unet``, ``transformer``, ``prior``), or None."""
        for name in ("unet", "transformer", "prior"):
            if getattr(self.pipe, name, None) is not None:
                return name
        return None

    @property
    def denoiser(self):
        """The denoiser module (possibly compiled), or None."""
        name = self.denoiser_name
        return getattr(self.pipe, name) if name else None

    @property
    def vae(self):
        """The pipeline's VAE, or None."""
        return getattr(self.pipe, "vae", None)


def device_of(pipe) -> str:
    """The device type the pipeline runs on (its execution device when components are offloaded)."""
    dev = getattr(pipe, "_execution_device", None) or getattr(pipe, "device", None)
    return getattr(dev, "type", str(dev or "cpu"))


def _inner(mod):
    return getattr(mod, "_orig_mod", mod)


def _processors(mod) -> dict:
    try:
        return dict(_inner(mod).attn_processors)
    except Exception:
        return {}


def _classes(procs: dict) -> str:
    from collections import Counter

    return ", ".join(f"{k} x {n}" for k, n in Counter(type(p).__name__ for p in procs.values()).most_common())


def _params_dtype(mod):
    p = next(_inner(mod).parameters(), None) if mod is not None else None
    return None if p is None else p.dtype


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return line
    except OSError:
        pass
    return ""


def _offloaded(pipe) -> list[str]:
    comps = getattr(pipe, "components", {}) or {}
    return [n for n, m in comps.items() if getattr(_inner(m), "_hf_hook", None) is not None]


def _image_px(site: Site) -> int:
    h = site.kwargs.get("height") or 0
    w = site.kwargs.get("width") or 0
    if not h or not w:
        d = site.denoiser
        cfg = getattr(_inner(d), "config", None)
        size = getattr(cfg, "sample_size", None) if cfg is not None else None
        scale = getattr(site.pipe, "vae_scale_factor", 8)
        if isinstance(size, int):
            return size * scale
    return max(h or 0, w or 0)


def _batch(site: Site) -> int:
    prompt = site.kwargs.get("prompt")
    n = len(prompt) if isinstance(prompt, (list, tuple)) else 1
    return n * int(site.kwargs.get("num_images_per_prompt") or 1)


def check(name: str, site: Site) -> str | None:
    """None when fix ``name`` applies to ``site``, else why not (one phrase)."""
    import torch

    d, vae = site.denoiser, site.vae
    if name == "sdpa" or name in _SDPA_BACKENDS:
        if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            return f"torch {torch.__version__} has no scaled_dot_product_attention"
        procs = {**_processors(d), **_processors(vae)}
        if not procs:
            return "no attention processors on the denoiser or the VAE"
        classic = [p for p in procs.values() if type(p).__name__ in _CLASSIC]
        if name in _SDPA_BACKENDS:
            if site.device != "cuda":
                return f"the {name[5:]} backend is a CUDA kernel (this pipeline runs on {site.device})"
            return _backend_missing(name, site)
        if not classic:
            return f"already on SDPA ({_classes(procs)})"
        return None
    if name == "compile":
        if d is None:
            return "no denoiser (unet/transformer) on the pipeline"
        if type(d).__name__ == "OptimizedModule":
            return "the denoiser is already compiled (torch.compile)"
        if not hasattr(torch, "compile"):
            return f"torch {torch.__version__} has no torch.compile"
        return None
    if name == "channels_last":
        convs = [m for m in _inner(d).modules() if isinstance(m, torch.nn.Conv2d)] if d is not None else []
        if not convs:
            return "the denoiser has no 2-D convolutions"
        if convs[0].weight.is_contiguous(memory_format=torch.channels_last) and not convs[0].weight.is_contiguous():
            return "the denoiser is already channels_last"
        return None
    if name in ("fp16", "bf16"):
        want = torch.float16 if name == "fp16" else torch.bfloat16
        have = _params_dtype(d)
        if have == want:
            return f"the denoiser is already {str(want)[6:]}"
        if site.device == "cpu":
            if name == "fp16":
                return "float16 on the CPU (no fast float16 kernels there)"
            flags = _cpu_flags()
            if "avx512_bf16" not in flags and "amx_bf16" not in flags:
                return "this CPU has no bfloat16 instructions (avx512_bf16 / amx_bf16)"
        if site.device == "cuda" and name == "bf16" and not torch.cuda.is_bf16_supported():
            return "this GPU does not support bfloat16"
        if site.device == "mps" and name == "bf16":
            return "bfloat16 on MPS"
        return None
    if name in ("vae-tiling", "vae-slicing"):
        if vae is None or not hasattr(vae, "enable_tiling" if name == "vae-tiling" else "enable_slicing"):
            return "no VAE with " + ("tiling" if name == "vae-tiling" else "slicing")
        if getattr(vae, "use_tiling" if name == "vae-tiling" else "use_slicing", False):
            return f"{name[4:]} is already on"
        if name == "vae-tiling":
            tile = getattr(vae, "tile_sample_min_size", None)
            px = _image_px(site)
            if isinstance(tile, int) and px and px <= tile:
                return f"the image ({px} px) is not above the VAE's tile ({tile} px): tiling would not change the decode"
        elif _batch(site) < 2:
            return "one image per call: slicing decodes the batch one image at a time"
        return None
    if name == "fuse-qkv":
        if d is None or not hasattr(_inner(d), "fuse_qkv_projections"):
            return "the denoiser has no fuse_qkv_projections"
        procs = _processors(d)
        if any("Fused" in type(p).__name__ for p in procs.values()):
            return "the projections are already fused"
        if any("Added" in type(p).__name__ for p in procs.values()):
            return "attention with added KV projections cannot be fused"
        if any(type(p).__name__ in _CLASSIC for p in procs.values()):
            return "fusing needs SDPA processors (try it with sdpa)"
        return None
    if name == "no-offload":
        off = _offloaded(site.pipe)
        return None if off else "no CPU offload hook on the pipeline's components"
    if name == "sync-free-scheduler":
        from .schedulers import removes

        s = getattr(site.pipe, "scheduler", None)
        if s is None:
            return "the pipeline has no scheduler"
        if not removes(s):
            return (f"the scheduler's step ({type(s).__name__}) makes no host sync this fix removes"
                    + (" (its begin index is already set)" if getattr(s, "begin_index", None) is not None else ""))
        return None
    raise ValueError(f"unknown fix {name!r}")


def _backend_missing(name: str, site: Site) -> str | None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, _SDPA_BACKENDS[name])
    dtype = _params_dtype(site.denoiser) or torch.float32
    q = torch.randn(1, 2, 16, 8, device=site.device, dtype=dtype)
    try:
        with sdpa_kernel([backend]):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
    except RuntimeError as e:
        return f"{name[5:]} is unavailable on this device ({str(dtype)[6:]}): {str(e).splitlines()[0][:120]}"
    return None


def apply(name: str, site: Site) -> str:
    """Apply fix ``name`` to ``site``'s pipeline in place; returns what was done (one phrase)."""
    import torch

    pipe, d, vae = site.pipe, site.denoiser, site.vae
    if name == "sdpa" or name in _SDPA_BACKENDS:
        from diffusers.models.attention_processor import AttnProcessor2_0

        done = []
        for label, mod in (("denoiser", d), ("vae", vae)):
            procs = _processors(mod)
            if any(type(p).__name__ in _CLASSIC for p in procs.values()):
                _inner(mod).set_attn_processor(AttnProcessor2_0())
                done.append(f"{label}: {len(procs)} processors")
        if name in _SDPA_BACKENDS:
            from torch.nn.attention import SDPBackend

            site.backend = getattr(SDPBackend, _SDPA_BACKENDS[name])
            done.append(f"backend {_SDPA_BACKENDS[name]}")
        return "AttnProcessor2_0 (" + "; ".join(done or ["already SDPA"]) + ")"
    if name == "compile":
        attr = site.denoiser_name
        mode = site.compile_mode
        compiled = torch.compile(d, backend="eager") if mode == "eager" else torch.compile(
            d, mode=None if mode == "default" else mode)
        setattr(pipe, attr, compiled)
        return f"torch.compile(pipe.{attr}, mode={mode})"
    if name == "channels_last":
        _inner(d).to(memory_format=torch.channels_last)
        if vae is not None:
            vae.to(memory_format=torch.channels_last)
        return "denoiser" + (" and VAE" if vae is not None else "") + " weights channels_last"
    if name in ("fp16", "bf16"):
        dtype = torch.float16 if name == "fp16" else torch.bfloat16
        keep_vae = name == "fp16" and vae is not None and bool(getattr(vae.config, "force_upcast", True))
        for cname, mod in (getattr(pipe, "components", {}) or {}).items():
            if isinstance(mod, torch.nn.Module) and not (keep_vae and mod is vae):
                mod.to(dtype=dtype)
        if keep_vae:
            _cast_vae_input(vae)
        return f"components in {str(dtype)[6:]}" + ("; the VAE kept in float32 (force_upcast)" if keep_vae else "")
    if name == "vae-tiling":
        vae.enable_tiling()
        return "vae.enable_tiling()"
    if name == "vae-slicing":
        vae.enable_slicing()
        return "vae.enable_slicing()"
    if name == "fuse-qkv":
        _inner(d).fuse_qkv_projections()
        what = "denoiser"
        if vae is not None and hasattr(vae, "fuse_qkv_projections") and not any(
                type(p).__name__ in _CLASSIC for p in _processors(vae).values()):
            vae.fuse_qkv_projections()
            what += " and VAE"
        return f"{what}: fuse_qkv_projections()"
    if name == "no-offload":
        off = _offloaded(pipe)
        dev = getattr(pipe, "_execution_device", None)
        pipe.remove_all_hooks()
        for n in off:  # sequential offload leaves hooks on submodules too
            m = _inner(getattr(pipe, n))
            for sub in m.modules():
                if getattr(sub, "_hf_hook", None) is not None:
                    from accelerate.hooks import remove_hook_from_module

                    remove_hook_from_module(sub, recurse=True)
        pipe.to(dev)
        return f"offload hooks removed from {', '.join(off)}; pipeline on {dev}"
    if name == "sync-free-scheduler":
        from .schedulers import SyncFreeSteps

        return SyncFreeSteps(pipe.scheduler).install()
    raise ValueError(f"unknown fix {name!r}")


def _cast_vae_input(vae) -> None:
    """The float32 VAE fed half-precision tensors: its decoder's (and encoder's) first module casts its input."""
    import torch

    def cast(_module, args):
        return tuple(a.to(torch.float32) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)

    for first in (getattr(vae, "post_quant_conv", None) or getattr(vae, "decoder", None), getattr(vae, "encoder", None)):
        if first is not None:
            first.register_forward_pre_hook(cast)


def call_context(site: Site):
    """The context every measured call (and the program's own) runs in: the SDPA backend chosen, if any."""
    if site.backend is None:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel([site.backend])
