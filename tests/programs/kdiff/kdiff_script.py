"""A research-repo script on the real k-diffusion package: DPM++ 2M (or another ``sample_*``) over the script's own
small denoiser (not diffusers), with a live-preview callback that is slow at one step (``--slow-step``).

k-diffusion's package ``__init__`` imports its training modules (torchvision, clean-fid, wandb...); the samplers
need none of them, so the script loads ``k_diffusion.sampling`` on its own (with an empty ``torchvision`` stand-in
for ``k_diffusion.utils``'s import when torchvision cannot be imported: the registry's build for this torch is a
CUDA one)."""
import argparse
import importlib.util
import sys
import time
import types


def load_sampling():
    spec = importlib.util.find_spec("k_diffusion")
    pkg = types.ModuleType("k_diffusion")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["k_diffusion"] = pkg
    try:
        import torchvision.transforms.functional  # noqa: F401
    except Exception:
        for name in ("torchvision", "torchvision.transforms", "torchvision.transforms.functional"):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]
        sys.modules["torchvision.transforms"].functional = sys.modules["torchvision.transforms.functional"]
    import k_diffusion.sampling as sampling
    return sampling


import torch  # noqa: E402
from torch import nn  # noqa: E402


class TinyUNet(nn.Module):
    """A small conv denoiser: ``forward(x, sigma) -> denoised``."""

    def __init__(self, ch=4, width=32):
        super().__init__()
        self.inp = nn.Conv2d(ch, width, 3, padding=1)
        self.mid = nn.Sequential(nn.SiLU(), nn.Conv2d(width, width, 3, padding=1), nn.SiLU())
        self.out = nn.Conv2d(width, ch, 3, padding=1)

    def forward(self, x, sigma):
        h = self.mid(self.inp(x / (1 + sigma[:, None, None, None] ** 2) ** 0.5))
        time.sleep(0.015)  # (what a GPU's kernels would take: wall-steady on a busy CPU machine)
        return x - sigma[:, None, None, None] * self.out(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sampler", default="sample_dpmpp_2m")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--slow-step", type=int, default=6)
    a = ap.parse_args()
    sampling = load_sampling()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyUNet().eval()
    sigmas = sampling.get_sigmas_karras(a.steps, 0.03, 14.6)
    x = torch.randn(1, 4, 32, 32) * sigmas[0]

    def preview(info):  # a live preview: decode the current estimate; slow at one step
        if info["i"] == a.slow_step:
            img = info["denoised"]
            for _ in range(400):
                img = torch.tanh(img * 1.01)
            time.sleep(0.15)

    with torch.no_grad():
        out = getattr(sampling, a.sampler)(model, x, sigmas, callback=preview, disable=True)
    print("done", tuple(out.shape), round(float(out.abs().mean()), 4))


if __name__ == "__main__":
    main()
