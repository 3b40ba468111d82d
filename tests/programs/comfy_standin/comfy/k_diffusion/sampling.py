"""ComfyUI's copy of k-diffusion's samplers (comfy/k_diffusion/sampling.py), on floats."""


def trange(n, disable=None):
    return range(n)


def sample_euler(model, x, sigmas, extra_args=None, callback=None, disable=None):
    extra_args = {} if extra_args is None else extra_args
    for i in trange(len(sigmas) - 1, disable=disable):
        denoised = model(x, sigmas[i], **extra_args)
        d = (x - denoised) / sigmas[i]
        if callback is not None:
            callback({'x': x, 'i': i, 'sigma': sigmas[i], 'sigma_hat': sigmas[i], 'denoised': denoised})
        dt = sigmas[i + 1] - sigmas[i]
        x = x + d * dt
    return x
