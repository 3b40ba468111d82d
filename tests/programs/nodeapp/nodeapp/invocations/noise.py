import torch

from .baseinvocation import BaseInvocation, invocation


@invocation("noise")
class NoiseInvocation(BaseInvocation):
    """Initial latents from a seed."""

    def invoke(self, context):
        g = torch.Generator().manual_seed(int(self.fields.get("seed", 0)))
        size = int(self.fields.get("size", 64)) // 8
        return {"noise": torch.randn((1, context.model.unet.config.in_channels, size, size), generator=g)}
