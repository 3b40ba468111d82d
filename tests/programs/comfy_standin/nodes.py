"""The built-in nodes of the stand-in: a txt2img graph. KSampler's preview callback is slow at ``slow_step``."""
import time

import comfy.model_management
import comfy.samplers
import comfy.sd
from comfy.model_base import _busy


class CheckpointLoaderSimple:
    def load_checkpoint(self, ckpt_name):
        return comfy.sd.load_checkpoint_guess_config(ckpt_name)


class CLIPTextEncode:
    def encode(self, clip, text):
        return (clip.encode_from_tokens(text.split()),)


class EmptyLatentImage:
    def generate(self, width, height):
        return (float(width * height) / 4096,)


class KSampler:
    def sample(self, model, seed, steps, positive, negative, latent_image, slow_step=-1):
        sigmas = [10.0 * (1 - k / steps) + 0.1 for k in range(steps)] + [0.0]

        def preview(i, denoised, x, total):  # ComfyUI's latent preview, slow at one step
            if i == slow_step:
                _busy(0.15)

        comfy.model_management.load_models_gpu([model])
        sampler = comfy.samplers.ksampler("euler")
        return (sampler.sample(lambda x, s, **kw: comfy.samplers.calc_cond_batch(model, [positive], x, s, {})[0], sigmas, {}, preview, latent_image + seed),)


class VAEDecode:
    def decode(self, vae, samples):
        return (vae.decode(samples),)


class SaveImage:
    OUTPUT_NODE = True

    def save_images(self, images):
        _busy(0.002)
        return {"ui": {"images": [images]}}


NODE_CLASS_MAPPINGS = {c.__name__: c for c in (CheckpointLoaderSimple, CLIPTextEncode, EmptyLatentImage, KSampler,
                                                 VAEDecode, SaveImage)}
FUNCTIONS = {"CheckpointLoaderSimple": "load_checkpoint", "CLIPTextEncode": "encode", "EmptyLatentImage": "generate",
             "KSampler": "sample", "VAEDecode": "decode", "SaveImage": "save_images"}
