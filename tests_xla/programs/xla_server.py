"""A long-running PyTorch/XLA service: starts stepscope's control server, then runs the tiny pipeline on
the XLA device (the fixed Euler scheduler) again and again. Prints "ready" after the first image; with a path
argument, writes the number of images made so far to that file after each (replaced whole)."""
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
progress = sys.argv[1] if len(sys.argv) > 1 else None
images = 0
while True:
    pipe("a cat", num_inference_steps=3, height=64, width=64, generator=torch.Generator().manual_seed(0),
         output_type="np")
    images += 1
    if progress:
        with open(progress + ".tmp", "w") as f:
            f.write(str(images))
        os.replace(progress + ".tmp", progress)
    if images == 1:
        print("ready", flush=True)
