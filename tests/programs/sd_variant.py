"""A user's txt2img script with one knob per thing that can make a pipeline slower (for `stepscope diff`)."""
import argparse
import time

import torch

from stepscope.pipelines.sd import build_pipeline


def slow_preview(latents):
    # stands in for a costly per-step hook (a preview decode)
    time.sleep(0.15)  # longer than a step of the tiny pipeline on a busy machine
    return latents


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--calls", type=int, default=1)
    ap.add_argument("--attn", default="default", choices=["default", "classic", "sdpa"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--slow-callback", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pipe = build_pipeline(args.model)
    if args.attn != "default":
        from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0

        pipe.unet.set_attn_processor(AttnProcessor() if args.attn == "classic" else AttnProcessor2_0())
    if args.dtype != "float32":
        pipe = pipe.to(getattr(torch, args.dtype))

    def on_step_end(pipe, i, t, kw):
        slow_preview(kw["latents"])
        return kw

    kwargs = {"callback_on_step_end": on_step_end, "callback_on_step_end_tensor_inputs": ["latents"]} if args.slow_callback else {}
    for _ in range(args.calls):
        out = pipe("a cat", num_inference_steps=args.steps, height=args.size, width=args.size,
                   generator=torch.Generator().manual_seed(0), **kwargs)
    print("image", out.images[0].size)


if __name__ == "__main__":
    main()
