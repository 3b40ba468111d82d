"""Build a real ``diffusers.StableDiffusionPipeline`` with no download.

Models (``build_pipeline(model=...)``):

- ``"tiny"``: test-sized (UNet 32/64 channels, a 2-layer CLIP text encoder, a 2-level VAE);
  10 steps at 64 px take about a second on 2 cores.
- ``"sd15"``: the Stable Diffusion 1.5 shapes with random weights: UNet2DConditionModel defaults with
  ``cross_attention_dim=768`` (859.5M parameters), a CLIP ViT-L/14-sized text encoder (12 layers, 768
  wide), the SD VAE (128/256/512/512). Shapes from the SD 1.5 ``model_index.json`` configs.
- a folder path: ``StableDiffusionPipeline.from_pretrained(path, local_files_only=True)``.

The CLIP tokenizer uses a byte-level vocabulary written locally (every byte, alone and word-final, plus
the start/end tokens; no merges), with ``model_max_length=77``: prompts tokenise to real ids of the
right length, and the text encoder runs at its real sequence length.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

SCHEDULERS = {
    "ddim": ("diffusers.schedulers.scheduling_ddim", "DDIMScheduler"),
    "euler": ("diffusers.schedulers.scheduling_euler_discrete", "EulerDiscreteScheduler"),
    "dpm": ("diffusers.schedulers.scheduling_dpmsolver_multistep", "DPMSolverMultistepScheduler"),
}

# SD 1.5's scheduler config (scheduler/scheduler_config.json)
_SCHEDULER_CONFIG = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
                         steps_offset=1, clip_sample=False, set_alpha_to_one=False, prediction_type="epsilon")

MODELS = ("tiny", "sd15")


def demo_traces(scheduler: str = "ddim") -> list[str]:
    """The demo's trace list: pipeline call, prompt encoding, UNet forward, scheduler step, VAE decode,
    the attention processors, GroupNorm."""
    mod, cls = SCHEDULERS[scheduler]
    pipe = "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.StableDiffusionPipeline"
    return [
        f"{pipe}.__call__",
        f"{pipe}.encode_prompt",
        "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
        f"{mod}.{cls}.step",
        "diffusers.models.autoencoders.autoencoder_kl.AutoencoderKL.decode",
        "diffusers.models.attention_processor.*.__call__",
        "torch.nn.modules.normalization.GroupNorm.forward",
    ]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which CLIP's BPE vocabulary is written in
    (openai/CLIP ``simple_tokenizer.py``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_tokenizer_files(folder: str | os.PathLike) -> tuple[Path, Path, int]:
    """Write ``vocab.json`` and ``merges.txt`` of the byte-level CLIP vocabulary; returns their paths and
    the vocabulary size."""
    chars = list(bytes_to_unicode().values())
    tokens = chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(tokens)}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab_path, merges_path = folder / "vocab.json", folder / "merges.txt"
    vocab_path.write_text(json.dumps(vocab))
    merges_path.write_text("#version: 0.2\n")
    return vocab_path, merges_path, len(vocab)


def _tokenizer():
    from transformers import CLIPTokenizer

    # loaded as a saved tokenizer folder: transformers 4 and 5 both read vocab.json/merges.txt that way (their
    # constructors differ: 5 takes vocab=/merges= and quietly builds a 3-token vocabulary from vocab_file=)
    with tempfile.TemporaryDirectory(prefix="stepscope-clip-") as folder:
        vocab, merges, size = write_tokenizer_files(folder)
        (Path(folder) / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 77}))
        tok = CLIPTokenizer.from_pretrained(folder, local_files_only=True)
    if len(tok) != size:
        raise RuntimeError(f"the built-in CLIP tokenizer has {len(tok)} tokens, expected {size}")
    return tok, size


def _components(model: str):
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer, vocab_size = _tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    bos = tokenizer.convert_tokens_to_ids("<|startoftext|>")
    if model == "tiny":
        unet = UNet2DConditionModel(
            sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=32, attention_head_dim=4, norm_num_groups=8)
        text = CLIPTextModel(CLIPTextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, max_position_embeddings=77, bos_token_id=bos,
                                            eos_token_id=eos, pad_token_id=eos))
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                            layers_per_block=1, norm_num_groups=8, sample_size=64)
    elif model == "sd15":
        unet = UNet2DConditionModel(sample_size=64, cross_attention_dim=768)
        text = CLIPTextModel(CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                            num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
                                            projection_dim=768, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos))
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(128, 256, 512, 512),
                            down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                            layers_per_block=2, norm_num_groups=32, sample_size=512)
    else:
        raise ValueError(f"--model: expected tiny, sd15 or a model folder, got {model!r}")
    return unet, text, vae, tokenizer


def make_scheduler(name: str, config: dict | None = None):
    """A scheduler by short name (ddim, euler, dpm), from SD 1.5's config or ``config``."""
    import importlib

    if name not in SCHEDULERS:
        raise ValueError(f"--scheduler: expected one of {', '.join(SCHEDULERS)}, got {name!r}")
    mod, cls = SCHEDULERS[name]
    klass = getattr(importlib.import_module(mod), cls)
    return klass.from_config(config) if config is not None else klass(**_filter(klass, _SCHEDULER_CONFIG))


def _filter(klass, cfg: dict) -> dict:
    import inspect

    params = inspect.signature(klass.__init__).parameters
    return {k: v for k, v in cfg.items() if k in params}


def build_pipeline(model: str = "tiny", scheduler: str = "ddim", seed: int = 0, device: str | None = None):
    """A StableDiffusionPipeline, float32, on the CPU or on ``device`` (``"cuda"``...). ``model``: tiny, sd15 or
    a local folder. With a device, random weights are made on it (``torch.device`` as the default device while
    the models are built: sd15's 1.07G parameters in a fraction of a second on a GPU instead of seconds on the CPU);
    a folder's weights are loaded, then moved there.

    Raises ValueError for an unknown model/scheduler, FileNotFoundError for a missing folder.
    """
    import torch
    from diffusers import StableDiffusionPipeline

    if model not in MODELS:
        path = Path(model)
        if not path.is_dir():
            raise FileNotFoundError(f"--model {model}: no such model folder (expected tiny, sd15 or a diffusers folder)")
        pipe = StableDiffusionPipeline.from_pretrained(str(path), local_files_only=True, safety_checker=None,
                                                       requires_safety_checker=False)
        pipe.scheduler = make_scheduler(scheduler, pipe.scheduler.config)
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device) if device else pipe
    torch.manual_seed(seed)
    if device and torch.device(device).type != "cpu":
        with torch.device(device):
            unet, text, vae, tokenizer = _components(model)
    else:
        unet, text, vae, tokenizer = _components(model)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tokenizer, unet=unet,
                                   scheduler=make_scheduler(scheduler), safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def default_size(model: str) -> int:
    """Image size (px) that the model's UNet was configured for."""
    return 64 if model == "tiny" else 512
