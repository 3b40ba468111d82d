"""A worker thread runs denoising loops with classifier-free guidance unbatched (two UNet calls per step,
sharing the step's timestep), each call followed by 0.3 s of other work; it starts stepscope's control
server and prints 'ready PID'."""
import os
import threading
import time

import torch

import stepscope
from stepscope.pipelines.sd import build_pipeline

stepscope.start_server()
pipe = build_pipeline("tiny")
cond = torch.randn(1, 77, pipe.unet.config.cross_attention_dim)
uncond = torch.zeros_like(cond)


def work():
    while True:
        pipe.scheduler.set_timesteps(6)
        latents = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            for t in pipe.scheduler.timesteps:
                u = pipe.unet(latents, t, encoder_hidden_states=uncond).sample
                time.sleep(0.3)
                c = pipe.unet(latents, t, encoder_hidden_states=cond).sample
                time.sleep(0.3)
                latents = pipe.scheduler.step(u + 7.5 * (c - u), t, latents).prev_sample


threading.Thread(target=work, daemon=True).start()
print("ready", os.getpid(), flush=True)
time.sleep(600)
