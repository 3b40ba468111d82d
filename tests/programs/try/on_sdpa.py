"""A txt2img script whose pipeline is already on SDPA (diffusers' default with torch 2)."""
import torch

from stepscope.pipelines.sd import build_pipeline

pipe = build_pipeline("tiny")
out = pipe("a lighthouse", height=32, width=32, num_inference_steps=3, generator=torch.Generator().manual_seed(2),
           output_type="latent")
print("latents", tuple(out.images.shape))
