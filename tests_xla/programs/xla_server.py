"""A long-running PyTorch/XLA service: starts stepscope's control server, then runs the tiny pipeline on
the XLA device (the fixed Euler scheduler) again and again. Prints "ready" after the first image."""
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch_xla  # noqa: E402

import stepscope  # noqa: E402
from stepscope.pipelines.sd import build_pipeline  # noqa: E402
from xla_sd import FixedEuler  # noqa: E402

stepscope.start_server()
pipe = build_pipeline("tiny", "euler")
pipe.scheduler = FixedEuler.from_config(pipe.scheduler.config)
pipe.to(torch_xla.device())
first = True
while True:
    pipe("a cat", num_inference_steps=3, height=64, width=64, generator=torch.Generator().manual_seed(0),
         output_type="np")
    if first:
        print("ready", flush=True)
        first = False
