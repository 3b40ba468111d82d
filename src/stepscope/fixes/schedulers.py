"""The ``sync-free-scheduler`` fix: a diffusers scheduler's denoising step without host syncs, outputs unchanged.

What makes the host wait in the common schedulers' step (diffusers 0.3x-0.4x; ``stepscope run --syncs`` lists it):

- the first step's index search, ``(timesteps == t).nonzero()`` then ``.item()`` (Euler, Euler ancestral,
  DPM-Solver++ ...: ``index_for_timestep``): skipped by ``set_begin_index(0)`` after each ``set_timesteps``;
- Euler's churn test ``s_tmin <= sigma <= s_tmax`` on a 0-d tensor (``Tensor.__bool__`` twice a step): the step
  runs here with that test on the sigma read on the host; every tensor operation is diffusers' own, in the same
  order, on the same tensors (``euler_step``), so the latents are bit-identical;
- DDIM's and PNDM's tensor timestep: ``prev_timestep >= 0`` (``__bool__``) and ``alphas_cumprod[t]`` with a device
  index: their step is given the timestep as the Python int it documents, the same value.

As the PyTorch/XLA guide did for Euler, the per-step values come from the host once per schedule: right after
``set_timesteps`` the timesteps (and Euler's sigmas, kept on the CPU by diffusers) are read as lists (one copy
before the loop). Which entry a step is at is read from the timestep tensor's metadata (``position``: pipelines
pass ``t`` from ``for t in timesteps``, a view of the scheduler's timesteps, so its storage offset is its index),
never from its value. A call this module cannot place (a timestep that is not such a view, churn on a scheduler
subclass with its own step...) goes to the scheduler's own step, syncs and all.

torch and diffusers are imported inside the functions (this runs in ``fixes.child``).
"""

from __future__ import annotations

#: schedulers whose step takes the timestep as an int (their own ``step``, ``step_plms``/``step_prk`` reading it)
HOST_TIMESTEP = ("DDIMScheduler", "PNDMScheduler")
EULER = "EulerDiscreteScheduler"
_PREDICTIONS = ("original_sample", "sample", "epsilon", "v_prediction")


def step_owner(sched) -> str | None:
    """The diffusers class whose ``step`` the scheduler runs (``"EulerDiscreteScheduler"``), None when the step is
    not one of diffusers' own."""
    f = getattr(type(sched), "step", None)
    if f is None or not getattr(f, "__module__", "").startswith("diffusers."):
        return None
    return f.__qualname__.rsplit(".", 1)[0]


def searches_index(sched) -> bool:
    """The scheduler finds its first step index with ``index_for_timestep`` (``.nonzero().item()``) unless its
    begin index is set, and it is not set."""
    return (hasattr(sched, "set_begin_index") and hasattr(sched, "index_for_timestep")
            and getattr(sched, "begin_index", None) is None)


def removes(sched) -> list[str]:
    """What the fix removes from this scheduler's steps, in words (empty: nothing, the fix does not apply)."""
    owner = step_owner(sched)
    out = []
    if searches_index(sched):
        out.append("set_begin_index(0) after set_timesteps (no .nonzero().item() index search)")
    if owner == EULER:
        out.append("the churn test on the sigma read on the host (no Tensor.__bool__)")
    elif owner in HOST_TIMESTEP:
        out.append("each timestep given to step as the host int (no Tensor.__bool__, no device index)")
    return out


def position(t, timesteps) -> int | None:
    """The index of the 0-d tensor ``t`` in the 1-d tensor ``timesteps`` when ``t`` is a view of one of its
    entries (``for t in timesteps`` gives such views), from the tensors' metadata only (storage and offset: no
    device access); None otherwise."""
    import torch

    if not (torch.is_tensor(t) and torch.is_tensor(timesteps)) or t.dim() != 0 or timesteps.dim() != 1:
        return None
    if t.dtype != timesteps.dtype or t.device != timesteps.device:
        return None
    if t.untyped_storage().data_ptr() != timesteps.untyped_storage().data_ptr():
        return None
    off, stride = t.storage_offset() - timesteps.storage_offset(), timesteps.stride(0)
    if stride <= 0 or off < 0 or off % stride:
        return None
    k = off // stride
    return k if k < timesteps.shape[0] else None


class SyncFreeSteps:
    """Installed on one scheduler object (instance attributes ``set_timesteps`` and ``step``; the class is left
    alone): the begin index set after each ``set_timesteps`` where the scheduler would search it, the schedule
    read on the host once, each step without the host syncs listed in the module's docstring."""

    def __init__(self, sched) -> None:
        self.sched = sched
        self.owner = step_owner(sched)
        self.set_begin = searches_index(sched)
        self.own_set_timesteps = sched.set_timesteps
        self.own_step = sched.step
        self.of = None  # the timesteps and sigmas tensors the host lists were read from
        self.sigmas_of = None
        self.timesteps: list = []
        self.sigmas: list = []

    def install(self) -> str:
        """Put the wrappers on the scheduler; returns what they do (one phrase)."""
        self.sched.set_timesteps = self.set_timesteps
        if self.owner == EULER or self.owner in HOST_TIMESTEP:
            self.sched.step = self.step
        return f"{type(self.sched).__name__}: " + "; ".join(removes(self.sched))

    def set_timesteps(self, *args, **kwargs):
        """The scheduler's own ``set_timesteps``, then the begin index (0: a pipeline that starts later, img2img,
        sets its own after this) and the host copy of the schedule."""
        r = self.own_set_timesteps(*args, **kwargs)
        if self.set_begin:
            self.sched.set_begin_index(0)
        self.read()
        return r

    def read(self) -> None:
        """The schedule on the host: the timesteps, and Euler's sigmas (a CPU tensor in diffusers)."""
        s = self.sched
        self.of = s.timesteps
        self.timesteps = s.timesteps.tolist() if s.timesteps is not None else []
        if self.owner == EULER:
            self.sigmas_of = s.sigmas
            self.sigmas = s.sigmas.tolist()

    def step(self, model_output, timestep, sample, *args, **kwargs):
        """The scheduler's step without its host syncs where the call can be placed, else its own."""
        s = self.sched
        if s.timesteps is not self.of or (self.owner == EULER and s.sigmas is not self.sigmas_of):
            # the schedule was replaced without set_timesteps: read it again
            self.read()
        if self.owner in HOST_TIMESTEP:
            k = position(timestep, s.timesteps)
            if k is not None:
                timestep = self.timesteps[k]
            return self.own_step(model_output, timestep, sample, *args, **kwargs)
        import torch

        if (s.step_index is None or not s.is_scale_input_called or s.config.prediction_type not in _PREDICTIONS
                or isinstance(timestep, (int, torch.IntTensor, torch.LongTensor))):
            return self.own_step(model_output, timestep, sample, *args, **kwargs)
        return euler_step(s, self.sigmas, model_output, sample, *args, **kwargs)


def euler_step(s, host_sigmas: list[float], model_output, sample, s_churn: float = 0.0, s_tmin: float = 0.0,
               s_tmax: float = float("inf"), s_noise: float = 1.0, generator=None, return_dict: bool = True):
    """``EulerDiscreteScheduler.step`` (diffusers 0.42) with its churn test on ``host_sigmas[step_index]`` (the
    same float32 value as ``s.sigmas[step_index]``) instead of the 0-d tensor: every tensor operation as diffusers
    does it. ``s``: the scheduler, its step index set (the caller checked). Returns the scheduler's output class
    (or the tuple with ``return_dict=False``)."""
    import torch
    from diffusers.schedulers.scheduling_euler_discrete import EulerDiscreteSchedulerOutput
    from diffusers.utils.torch_utils import randn_tensor

    i = s.step_index
    sample = sample.to(torch.float32)
    sigma = s.sigmas[i]
    gamma = min(s_churn / (len(s.sigmas) - 1), 2**0.5 - 1) if s_tmin <= host_sigmas[i] <= s_tmax else 0.0
    sigma_hat = sigma * (gamma + 1)
    if gamma > 0:
        noise = randn_tensor(model_output.shape, dtype=model_output.dtype, device=model_output.device,
                             generator=generator)
        eps = noise * s_noise
        sample = sample + eps * (sigma_hat**2 - sigma**2) ** 0.5
    kind = s.config.prediction_type
    if kind in ("original_sample", "sample"):
        pred_original_sample = model_output
    elif kind == "epsilon":
        pred_original_sample = sample - sigma_hat * model_output
    else:  # v_prediction
        pred_original_sample = model_output * (-sigma / (sigma**2 + 1) ** 0.5) + (sample / (sigma**2 + 1))
    derivative = (sample - pred_original_sample) / sigma_hat
    dt = s.sigmas[i + 1] - sigma_hat
    prev_sample = (sample + derivative * dt).to(model_output.dtype)
    s._step_index += 1  # diffusers' own counter (no public setter): step() advances it the same way
    if not return_dict:
        return prev_sample, pred_original_sample
    return EulerDiscreteSchedulerOutput(prev_sample=prev_sample, pred_original_sample=pred_original_sample)

