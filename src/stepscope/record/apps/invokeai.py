"""``--app invokeai``: the InvokeAI server: one span per node (invocation) run, named by its type and id, the
session, the denoising loop's steps (diffusers schedulers and UNet: ``core.steprules``), the VAE."""

from __future__ import annotations

from . import Preset

NODE = "invokeai.app.services.session_processor.session_processor_default.DefaultSessionRunner.run_node"
SESSION = "invokeai.app.services.session_processor.session_processor_default.DefaultSessionRunner.run"

PRESET = Preset(
    name="invokeai",
    description="InvokeAI: sessions, node runs by type and id, denoising steps, the UNet, the VAE",
    traces=(
        SESSION,
        NODE,
        "diffusers.schedulers.*.*.step",
        "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
        "diffusers.models.autoencoders.autoencoder_kl.AutoencoderKL.decode",
    ),
    labels={NODE: "{invocation.type or invocation.__class__.__name__} #{invocation.id}"},
    ops={NODE: "node", SESSION: "prompt"},
)
