"""The tiny txt2img pipeline with each common scheduler in turn (Euler, Euler ancestral, DPM-Solver++ multistep,
DDIM, PNDM); ``--fix``: the ``sync-free-scheduler`` fix applied to each scheduler first, as ``stepscope try`` applies
it at the pipeline's first call. Each scheduler's final latents are saved to ``--out`` (an .npz, one array per
scheduler) and a digest printed."""
import argparse
import hashlib

import numpy as np
import torch
from diffusers import (DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                       EulerDiscreteScheduler, PNDMScheduler)

from stepscope.pipelines.sd import build_pipeline

SCHEDULERS = {"euler": EulerDiscreteScheduler, "euler_a": EulerAncestralDiscreteScheduler,
              "dpm": DPMSolverMultistepScheduler, "ddim": DDIMScheduler, "pndm": PNDMScheduler}

ap = argparse.ArgumentParser()
ap.add_argument("--fix", action="store_true")
ap.add_argument("--out", required=True)
ap.add_argument("--steps", type=int, default=4)
a = ap.parse_args()
torch.set_num_threads(1)
pipe = build_pipeline("tiny")
config = pipe.scheduler.config
latents = {}
for name, cls in SCHEDULERS.items():
    pipe.scheduler = cls.from_config(config)
    if a.fix:
        from stepscope.fixes import catalog

        print(catalog.apply("sync-free-scheduler", catalog.Site(pipe, "cpu", {})))
    out = pipe("a lighthouse", height=32, width=32, num_inference_steps=a.steps, output_type="latent",
               generator=torch.Generator().manual_seed(3))
    latents[name] = out.images.numpy()
    print(name, hashlib.sha256(latents[name].tobytes()).hexdigest()[:16])
np.savez(a.out, **latents)
