"""``stepscope try``: fixes applied to an unmodified diffusers program at run time, measured against it.

The names and what each fix does (stdlib only: the CLI and ``suggest`` read this without torch):

- ``fixes.catalog``: each fix's applicability check and application (torch/diffusers, inside the child);
- ``fixes.child``: the child process (``python -m stepscope.fixes.child SCRIPT ARGS``): the program runs as
  written; at its first diffusers pipeline call the fixes are applied, the call is warmed up and re-called
  on the parent's command, timed per denoising step and per call;
- ``fixes.parent``: the parent: one process per configuration, interleaved repeats, the best combination;
- ``fixes.schedulers``: the ``sync-free-scheduler`` fix (a scheduler's step without host syncs);
- ``fixes.verdict``: the statistics and the recommendation (``bench.stats``), the outputs compared.
"""

from __future__ import annotations

#: fix name -> what it does, in the order configurations are run and combined
FIXES: dict[str, str] = {
    "sdpa": "attention through torch's scaled_dot_product_attention (AttnProcessor2_0) in place of classic processors",
    "sdpa-flash": "sdpa restricted to the flash-attention backend (CUDA)",
    "sdpa-efficient": "sdpa restricted to the memory-efficient backend (CUDA)",
    "sdpa-cudnn": "sdpa restricted to the cuDNN backend (CUDA)",
    "compile": "the denoiser through torch.compile (--compile-mode)",
    "channels_last": "the denoiser's and VAE's weights in channels_last memory format",
    "fp16": "the pipeline in float16 (the VAE kept in float32 when its config asks for an upcast)",
    "bf16": "the pipeline in bfloat16",
    "vae-tiling": "the VAE decodes in tiles",
    "vae-slicing": "the VAE decodes one image of the batch at a time",
    "fuse-qkv": "the attention's q, k, v projections fused into one matmul",
    "no-offload": "the CPU offload hooks removed, every component on the device",
    "sync-free-scheduler": "the scheduler's step without host syncs: its first index set (set_begin_index(0)) instead of "
                           "searched with .nonzero().item(); the schedule read on the host once, so Euler's churn test "
                           "and DDIM's/PNDM's timestep arithmetic are host values (fixes.schedulers)",
}

#: fixes of which at most one goes into a combination (the fastest of those that helped)
EXCLUSIVE = (("sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"), ("fp16", "bf16"))

#: torch.compile modes accepted by --compile-mode ("eager": Dynamo's capture without a compiler backend)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "eager")


def parse(text: str) -> list[str]:
    """``"sdpa,compile"`` or ``"all"`` -> fix names in ``FIXES`` order. Raises ValueError naming ``--fix`` and the
    unknown name."""
    names = [w.strip() for w in text.split(",") if w.strip()]
    if not names:
        raise ValueError("--fix: no fix named (known: all, " + ", ".join(FIXES) + ")")
    if "all" in names:
        return list(FIXES)
    bad = [n for n in names if n not in FIXES]
    if bad:
        raise ValueError(f"--fix: unknown fix {bad[0]!r} (known: all, {', '.join(FIXES)})")
    return [n for n in FIXES if n in names]


def label(fixes: list[str]) -> str:
    """A configuration's label: ``baseline`` or the fixes joined by `` + ``."""
    return " + ".join(fixes) if fixes else "baseline"
