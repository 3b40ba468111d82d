import torch

from .baseinvocation import BaseInvocation, invocation


@invocation("l2i")
class LatentsToImageInvocation(BaseInvocation):
    """Latents -> image (the VAE's decoder)."""

    def invoke(self, context):
        vae = context.model.vae
        with torch.no_grad():
            image = vae.decode(context.outputs["latents"] / vae.config.scaling_factor).sample
        return {"image": (image / 2 + 0.5).clamp(0, 1)}
