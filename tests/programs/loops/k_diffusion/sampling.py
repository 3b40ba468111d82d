"""k-diffusion's sampler loops, as in k_diffusion/sampling.py (crowsonkb/k-diffusion), on floats."""


def trange(n, disable=None):
    return range(n)


def to_d(x, sigma, denoised):
    return (x - denoised) / sigma if sigma else 0.0


def sample_euler(model, x, sigmas, extra_args=None, callback=None, disable=None):
    """Euler steps: one model evaluation a step."""
    extra_args = {} if extra_args is None else extra_args
    for i in trange(len(sigmas) - 1, disable=disable):
        denoised = model(x, sigmas[i], **extra_args)
        d = to_d(x, sigmas[i], denoised)
        if callback is not None:
            callback({'x': x, 'i': i, 'sigma': sigmas[i], 'denoised': denoised})
        dt = sigmas[i + 1] - sigmas[i]
        x = x + d * dt
    return x


def sample_heun(model, x, sigmas, extra_args=None, callback=None, disable=None):
    """Heun steps: two model evaluations a step but the last."""
    extra_args = {} if extra_args is None else extra_args
    for i in trange(len(sigmas) - 1, disable=disable):
        denoised = model(x, sigmas[i], **extra_args)
        d = to_d(x, sigmas[i], denoised)
        if callback is not None:
            callback({'x': x, 'i': i, 'sigma': sigmas[i], 'denoised': denoised})
        dt = sigmas[i + 1] - sigmas[i]
        if sigmas[i + 1] == 0:
            x = x + d * dt
        else:
            x_2 = x + d * dt
            denoised_2 = model(x_2, sigmas[i + 1], **extra_args)
            d_2 = to_d(x_2, sigmas[i + 1], denoised_2)
            x = x + (d + d_2) / 2 * dt
    return x


def sample_dpmpp_2m(model, x, sigmas, extra_args=None, callback=None, disable=None):
    """DPM-Solver++(2M): the previous step's output kept."""
    extra_args = {} if extra_args is None else extra_args
    old_denoised = None
    for i in trange(len(sigmas) - 1, disable=disable):
        denoised = model(x, sigmas[i], **extra_args)
        if callback is not None:
            callback({'x': x, 'i': i, 'sigma': sigmas[i], 'denoised': denoised})
        if old_denoised is None or sigmas[i + 1] == 0:
            x = denoised
        else:
            x = (x + denoised + old_denoised) / 3
        old_denoised = denoised
    return x


def sample_dpmpp_2m_alias(model, x, sigmas, **kw):
    """A sampler that calls another (no loop of its own: a plain scope)."""
    return sample_dpmpp_2m(model, x, sigmas, **kw)


class _State:
    pass


def sample_state_loop(model, x, sigmas, extra_args=None, callback=None, disable=None):
    """A loop whose head spans lines and whose targets are attributes (InvokeAI's
    ``for ctx.step_index, ctx.timestep in enumerate(...)``)."""
    ctx = _State()
    for ctx.i, ctx.sigma in enumerate(  # noqa: B020
        sigmas[:-1]
    ):
        x = model(x, ctx.sigma)
        if callback is not None:
            callback({'x': x, 'i': ctx.i, 'sigma': ctx.sigma, 'denoised': x})
    return x
