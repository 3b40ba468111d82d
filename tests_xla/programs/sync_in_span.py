"""A training-style loop whose step function calls torch_xla.sync() itself: wrapped in xp.Trace by hand
it fails ("Expecting scope to be empty"); traced by stepscope it must run unchanged."""
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")
import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.debug.profiler as xp  # noqa: E402


def train_step(w, x):
    y = torch.relu(x @ w).sum()
    torch_xla.sync()
    return y


def main():
    dev = torch_xla.device()
    w = torch.ones(16, 16, device=dev)
    x = torch.ones(4, 16, device=dev)
    total = 0.0
    for _ in range(3):
        if "--label-by-hand" in sys.argv:
            with xp.Trace("train_step"):
                y = train_step(w, x)
        else:
            y = train_step(w, x)
        total += float(y.cpu())
    print("total", total)


if __name__ == "__main__":
    main()
