"""A user's PyTorch/XLA txt2img script: the tiny Stable Diffusion pipeline (built offline) on the XLA
device, with the Euler scheduler in one of three forms:

- ``guide``: as diffusers had it when the PyTorch/XLA SD profiling guide was written: the schedule lives
  on the XLA device and every ``step`` looks its index up again (diffusers' own
  ``EulerDiscreteScheduler.index_for_timestep``: ``.nonzero()`` then ``.item()``) and compares
  ``s_tmin <= sigma <= s_tmax`` on a device tensor (``if tensor:``): each read cuts the graph and
  transfers from the device;
- ``fixed``: the guide's fix: the step index is counted on the host and the sigmas are read from a list
  of device tensors, so nothing is read back inside the loop: one graph per step, no transfer;
- ``stock``: the installed diffusers' EulerDiscreteScheduler, unchanged.

The pipeline's loop calls ``xm.mark_step()`` after every step (diffusers does on XLA).
"""
import argparse
import os
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla  # noqa: E402
from diffusers import EulerDiscreteScheduler  # noqa: E402

from stepscope.pipelines.sd import build_pipeline  # noqa: E402


class GuideEraEuler(EulerDiscreteScheduler):
    """The schedule on the device, the step index looked up on every step (diffusers <= 0.21)."""

    def set_timesteps(self, num_inference_steps=None, device=None, **kw):
        super().set_timesteps(num_inference_steps, device="cpu", **kw)
        dev = torch_xla.device()
        self.timesteps = self.timesteps.to(dev)
        self.sigmas = self.sigmas.to(dev)

    def step(self, model_output, timestep, sample, **kw):
        self._step_index = None  # looked up again from the timestep, as the guide's diffusers did
        return super().step(model_output, timestep, sample, **kw)


class FixedEuler(EulerDiscreteScheduler):
    """The guide's fix: the index counted on the host, sigmas as a list of device tensors, no reads."""

    def set_timesteps(self, num_inference_steps=None, device=None, **kw):
        super().set_timesteps(num_inference_steps, device="cpu", **kw)
        dev = torch_xla.device()
        self.timesteps = self.timesteps.to(dev)
        self.sigmas = self.sigmas.to(dev)
        self.sigma_list = list(self.sigmas.unbind(0))
        self._step_index = 0

    def scale_model_input(self, sample, timestep):
        sigma = self.sigma_list[self._step_index]
        self.is_scale_input_called = True
        return sample / ((sigma ** 2 + 1) ** 0.5)

    def step(self, model_output, timestep, sample, return_dict=True, **kw):
        sigma, sigma_next = self.sigma_list[self._step_index], self.sigma_list[self._step_index + 1]
        prev_sample = (sample + model_output * (sigma_next - sigma)).to(model_output.dtype)  # epsilon, no churn
        self._step_index += 1
        return (prev_sample, None) if not return_dict else type(self).Output(prev_sample=prev_sample)

    from diffusers.schedulers.scheduling_euler_discrete import EulerDiscreteSchedulerOutput as Output


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheduler", choices=("guide", "fixed", "stock"), default="guide")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--time", action="store_true", help="print each call's wall time (s)")
    args = ap.parse_args()
    pipe = build_pipeline("tiny", "euler")
    klass = {"guide": GuideEraEuler, "fixed": FixedEuler, "stock": EulerDiscreteScheduler}[args.scheduler]
    pipe.scheduler = klass.from_config(pipe.scheduler.config)
    pipe.to(torch_xla.device())
    for _ in range(args.runs):
        t0 = time.perf_counter()
        out = pipe("a cat", num_inference_steps=args.steps, height=64, width=64,
                   generator=torch.Generator().manual_seed(0), output_type="np")
        img = out.images[0]
        print("image", img.shape, f"{float(img.mean()):.4f}")
        if args.time:
            print(f"seconds {time.perf_counter() - t0:.4f}")


if __name__ == "__main__":
    main()
