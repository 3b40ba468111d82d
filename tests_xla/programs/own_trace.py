"""A PyTorch/XLA script that records its own profile, as the PyTorch/XLA guide shows (no stepscope):
xp.start_trace/stop_trace around a loop with an xp.Trace label, a read of a device value inside it
(.item(): a TransferFromDevice that cuts the graph) and torch_xla.sync() after each step."""
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")
import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.debug.profiler as xp  # noqa: E402

out = sys.argv[1]
dev = torch_xla.device()
w = torch.randn(64, 64, device=dev)
x = torch.randn(8, 64, device=dev)
xp.start_trace(out)
for step in range(4):
    with xp.Trace("denoise"):
        x = torch.tanh(x @ w)
        scale = x.abs().max().item()  # the read: the graph so far runs and its value comes back
        x = x / (scale + 1.0)
    torch_xla.sync()
xm.wait_device_ops()  # the last step's graph runs asynchronously: let it finish inside the trace
xp.stop_trace()
print("done", x.shape)
