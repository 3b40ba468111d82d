from .k_diffusion import sampling


class KSAMPLER:
    def __init__(self, sampler_function):
        self.sampler_function = sampler_function

    def sample(self, model_wrap, sigmas, extra_args, callback, noise, latent_image=None, denoise_mask=None,
               disable_pbar=False):
        k_callback = None
        if callback is not None:
            k_callback = lambda x: callback(x["i"], x["denoised"], x["x"], len(sigmas) - 1)
        return self.sampler_function(model_wrap, noise, sigmas, extra_args=extra_args, callback=k_callback,
                                     disable=disable_pbar)


def ksampler(name):
    return KSAMPLER(getattr(sampling, "sample_" + name))


def calc_cond_batch(model, conds, x_in, timestep, model_options):
    return [model.apply_model(x_in, timestep) for _ in conds]
