import torch

from .baseinvocation import BaseInvocation, invocation


@invocation("denoise_latents")
class DenoiseLatentsInvocation(BaseInvocation):
    """The denoising loop, step by step: the UNet and the scheduler's step, no pipeline ``__call__``."""

    def invoke(self, context):
        pipe = context.model
        sched, unet = pipe.scheduler, pipe.unet
        cond = context.outputs["conditioning"]
        guidance = float(self.fields.get("cfg", 7.5))
        sched.set_timesteps(int(self.fields.get("steps", 4)))
        latents = context.outputs["noise"] * sched.init_noise_sigma
        with torch.no_grad():
            for t in sched.timesteps:
                inp = sched.scale_model_input(torch.cat([latents] * 2), t)
                pred = unet(inp, t, encoder_hidden_states=cond).sample
                uncond, text = pred.chunk(2)
                pred = uncond + guidance * (text - uncond)
                latents = sched.step(pred, t, latents).prev_sample
        return {"latents": latents}
