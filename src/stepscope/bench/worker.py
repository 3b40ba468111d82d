"""One benchmark configuration in its own process: ``python -m stepscope.bench.worker CONFIG_JSON``.

It builds the Stable Diffusion pipeline (or the UNet alone) for its configuration once, then answers
commands read from stdin, one per line, with one JSON line each on stdout:

- ``warmup``: one untimed iteration (the first one pays for torch.compile): ``{"wall_s": ...}``;
- ``run``: one timed iteration: ``{"wall_s", "steps_s": [per-step s], "peak_bytes", "vm_peak"}`` (``vm_peak``:
  the address space's peak, ``VmPeak``, what ``RLIMIT_AS`` limits; bytes);
- ``quit``.

The first line it writes is ``{"ready": true, "setup_s", "env"}`` or ``{"error": ...}`` (for instance
an SDPA backend this device lacks: reported, never replaced by another). Timings are wall clock
(``perf_counter``) around the call, synchronised on CUDA; peak memory is the process's peak RSS on
CPU (``ru_maxrss``) and ``max_memory_allocated`` on CUDA, reset before each run.
"""

from __future__ import annotations

import contextlib
import json
import resource
import sys
import time


def _vm_peak() -> int | None:
    """The process's peak address space (``VmPeak``, bytes: what ``RLIMIT_AS`` limits), or None."""
    from ..record.memory.history import proc_bytes

    return proc_bytes("/proc/self/status", "VmPeak")


def _reply(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


class Target:
    """A built configuration: ``run()`` does one iteration and returns per-step times (s)."""

    def __init__(self, cfg: dict) -> None:
        import torch

        from ..pipelines.sd import build_pipeline, default_size

        self.torch = torch
        self.cfg = cfg
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.dtype = getattr(torch, cfg["dtype"])
        pipe = build_pipeline(cfg["model"], "ddim", device=self.device)
        pipe.to(self.device) if cfg["dtype"] == "float32" else pipe.to(self.device, self.dtype)
        self.size = cfg["size"] or default_size(cfg["model"])
        self.backend = self._attention(pipe, cfg["attention"])
        if cfg.get("channels_last"):
            pipe.unet.to(memory_format=torch.channels_last)
        if cfg["compile"] not in ("off", None, False):
            mode = cfg["compile"]
            pipe.unet = (torch.compile(pipe.unet, backend="eager") if mode == "eager"
                         else torch.compile(pipe.unet, mode=None if mode == "default" else mode))
        self.pipe = pipe
        if cfg["target"] == "unet":
            b = 2 * cfg["batch"]  # classifier-free guidance doubles the UNet batch
            lat = self.size // pipe.vae_scale_factor
            g = torch.Generator().manual_seed(0)
            self.latents = torch.randn(b, pipe.unet.config.in_channels, lat, lat, generator=g).to(self.device, self.dtype)
            self.text = torch.randn(b, 77, pipe.unet.config.cross_attention_dim, generator=g).to(self.device, self.dtype)
            self.t = torch.tensor(999, device=self.device)

    def _attention(self, pipe, name: str):
        from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0

        torch = self.torch
        if name == "classic":
            pipe.unet.set_attn_processor(AttnProcessor())
            pipe.vae.set_attn_processor(AttnProcessor())
            return None
        pipe.unet.set_attn_processor(AttnProcessor2_0())
        pipe.vae.set_attn_processor(AttnProcessor2_0())
        if name == "sdpa":
            return None
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {"sdpa-math": SDPBackend.MATH, "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
                   "sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[name]
        q = torch.randn(1, 2, 16, 8, device=self.device, dtype=self.dtype)
        try:
            with sdpa_kernel([backend]):
                torch.nn.functional.scaled_dot_product_attention(q, q, q)
        except RuntimeError as e:
            raise Unavailable(f"{name} is unavailable on {self.device} ({self.dtype}): {str(e).splitlines()[0]}") from None
        return backend

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def run(self) -> list[float]:
        torch = self.torch
        ctx = contextlib.nullcontext()
        if self.backend is not None:
            from torch.nn.attention import sdpa_kernel

            ctx = sdpa_kernel([self.backend])
        stamps: list[float] = []
        with ctx, torch.no_grad():
            if self.cfg["target"] == "unet":
                self.pipe.unet(self.latents, self.t, encoder_hidden_states=self.text)
                self._sync()
                return []

            def on_step(pipe, i, t, kw):
                self._sync()
                stamps.append(time.perf_counter())
                return kw

            start = time.perf_counter()
            self.pipe(["a photograph of an astronaut riding a horse"] * self.cfg["batch"], height=self.size, width=self.size,
                      num_inference_steps=self.cfg["steps"], output_type="np", callback_on_step_end=on_step,
                      generator=torch.Generator().manual_seed(0))
            self._sync()
        prev = start
        out = []
        for s in stamps:
            out.append(s - prev)
            prev = s
        return out


class Unavailable(RuntimeError):
    pass


def main() -> None:
    cfg = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    try:
        target = Target(cfg)
    except Unavailable as e:
        _reply({"error": str(e), "unavailable": True})
        return
    except Exception as e:  # reported to the parent, which records it for this configuration
        _reply({"error": f"{type(e).__name__}: {e}"})
        return
    torch = target.torch
    _reply({"ready": True, "setup_s": time.perf_counter() - t0,
            "env": {"torch": torch.__version__, "device": target.device,
                    "device_name": torch.cuda.get_device_name() if target.device == "cuda" else "cpu",
                    "threads": torch.get_num_threads(), "diffusers": __import__("diffusers").__version__}})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit" or not cmd:
            break
        try:
            if target.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            t = time.perf_counter()
            steps = target.run()
            wall = time.perf_counter() - t
            peak = (torch.cuda.max_memory_allocated() if target.device == "cuda"
                    else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
            _reply({"wall_s": wall, "steps_s": steps, "peak_bytes": int(peak), "kind": cmd, "vm_peak": _vm_peak()})
        except Exception as e:
            _reply({"error": f"{type(e).__name__}: {e}", "kind": cmd})


if __name__ == "__main__":
    main()
