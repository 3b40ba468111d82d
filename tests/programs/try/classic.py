"""A txt2img script that sets the classic attention processors (as older code does)."""
import argparse

import torch
from diffusers.models.attention_processor import AttnProcessor

from stepscope.pipelines.sd import build_pipeline

ap = argparse.ArgumentParser()
ap.add_argument("--size", type=int, default=32)
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--model", default="tiny")
ap.add_argument("--scheduler", default="ddim")
a = ap.parse_args()
pipe = build_pipeline(a.model, a.scheduler)
pipe.unet.set_attn_processor(AttnProcessor())
pipe.vae.set_attn_processor(AttnProcessor())
print("pipeline ready")
image = pipe("an astronaut riding a horse", height=a.size, width=a.size, num_inference_steps=a.steps,
             generator=torch.Generator().manual_seed(1), output_type="np").images
print("image", image.shape, f"mean {float(image.mean()):.2f}")
