"""``--app diffusers``: a diffusers pipeline (the default list of ``stepscope demo``, for any pipeline class)."""

from . import Preset

PRESET = Preset(
    name="diffusers",
    description="diffusers pipelines: the pipeline call, prompt encoding, the denoiser, the scheduler step, the VAE "
                "decode, the attention processors, GroupNorm",
    traces=(
        "diffusers.pipelines.*.*.*.__call__",
        "diffusers.pipelines.*.*.*.encode_prompt",
        "diffusers.models.unets.*.*.forward",
        "diffusers.models.transformers.*.*.forward",
        "diffusers.schedulers.*.*.step",
        "diffusers.models.autoencoders.*.*.decode",
        "diffusers.models.attention_processor.*.__call__",
        "torch.nn.modules.normalization.GroupNorm.forward",
    ),
)
