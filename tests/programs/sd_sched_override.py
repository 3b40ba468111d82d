"""A scheduler subclass whose step() calls super().step() (as guide or wrapper schedulers do): naming the base's step
traces both; the pipeline runs 3 steps."""
import torch
from diffusers.schedulers.scheduling_ddim import DDIMScheduler

from stepscope.pipelines.sd import build_pipeline


class LoggingDDIM(DDIMScheduler):
    def step(self, model_output, timestep, sample, **kw):
        return super().step(model_output, timestep, sample, **kw)


pipe = build_pipeline("tiny")
pipe.scheduler = LoggingDDIM.from_config(pipe.scheduler.config)
pipe("a cat", num_inference_steps=3, height=64, width=64, generator=torch.Generator().manual_seed(0), output_type="np")
print("done")
