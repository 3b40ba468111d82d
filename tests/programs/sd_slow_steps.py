"""A user's txt2img script: the tiny pipeline, with a step callback that is slow on chosen steps."""
import argparse
import time

import torch

from stepscope.pipelines.sd import build_pipeline


def heavy_postprocess(latents):
    # stands in for a costly per-step hook (a preview decode, a safety check...)
    x = latents
    for _ in range(40):
        x = torch.nn.functional.group_norm(x.repeat(1, 8, 8, 8), 4)[:, :4, :8, :8]
    # costly work of its own: 0.4 s of this thread's CPU (a sleep would be the thread waiting; CPU time, not wall time,
    # so that on a busy machine it grows as the UNet's steps do)
    end = time.thread_time() + 0.4
    while time.thread_time() < end:
        pass
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--slow", default="2,5")
    ap.add_argument("--scheduler", default="ddim")
    args = ap.parse_args()
    slow = {int(s) for s in args.slow.split(",") if s}
    torch.set_num_threads(1)  # steady step times on a shared machine (2 cores, other jobs)
    pipe = build_pipeline("tiny", args.scheduler)

    def on_step_end(pipe, i, t, kw):
        if i in slow:
            heavy_postprocess(kw["latents"])
        return kw

    out = pipe("a cat", num_inference_steps=args.steps, height=64, width=64, callback_on_step_end=on_step_end,
               callback_on_step_end_tensor_inputs=["latents"])
    print("image", out.images[0].size)


if __name__ == "__main__":
    main()
