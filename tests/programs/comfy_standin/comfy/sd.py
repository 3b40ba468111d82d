import time

from .model_base import _busy


class CLIP:
    def encode_from_tokens(self, tokens, return_pooled=False):
        _busy(0.003)
        return [len(tokens)]


class VAE:
    def encode(self, pixel_samples):
        return pixel_samples

    def decode(self, samples_in, vae_options={}):
        _busy(0.01)
        return samples_in


def load_checkpoint_guess_config(ckpt_path, output_vae=True, output_clip=True):
    _busy(0.03)
    from .model_base import BaseModel
    return BaseModel(), CLIP(), VAE()
