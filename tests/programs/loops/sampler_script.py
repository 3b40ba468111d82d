"""A research-repo style script: a k-diffusion sampler over the script's own model, with a live-preview callback
that is slow at one step (``--slow-step``)."""
import argparse
import time

from k_diffusion import sampling


class TinyUNet:
    def forward(self, x, sigma):
        time.sleep(0.015)  # (a device's time: wall-steady on a busy machine)
        return x * 0.9

    def __call__(self, x, sigma):
        return self.forward(x, sigma)


def preview(info, slow_step):
    if info['i'] == slow_step:
        t = time.thread_time() + 0.15  # CPU time: at least as long in wall time, however busy the machine
        while time.thread_time() < t:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sampler", default="sample_dpmpp_2m")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--slow-step", type=int, default=5)
    ap.add_argument("--images", type=int, default=1)
    a = ap.parse_args()
    model = TinyUNet()
    sigmas = [10.0 * (1 - k / a.steps) for k in range(a.steps)] + [0.0]
    fn = getattr(sampling, a.sampler)
    for _ in range(a.images):
        x = fn(model, 1.0, sigmas, callback=lambda info: preview(info, a.slow_step))
    print("done", round(x, 6))


if __name__ == "__main__":
    main()
