"""The program that `make gpu-check` (benchmarks/gpu_check.py) runs, plain and under `stepscope run`: an ordinary
txt2img script that knows nothing of stepscope, with the pipeline on a chosen device and dtype.

    python benchmarks/gpu_program.py --model sd15 --device cuda --dtype float16 --size 512 --steps 10 \
        --scheduler euler [--warmup 1] [--calls 3] [--compile off|inductor|eager]

It builds the pipeline (random weights, no download: ``stepscope.pipelines.sd``), runs ``--warmup`` untimed
calls, then ``--calls`` timed ones (wall clock around the call, ``torch.cuda.synchronize()`` before and after on
CUDA), and prints one line ``RESULT {json}``: ``calls_s`` (s per timed call), ``warmup_s``, ``build_s``, the
device and, with ``--compile``, Dynamo's counters (``graphs``: unique graphs, ``graph_breaks``, ``frames``).
"""

from __future__ import annotations

import argparse
import json
import time


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--scheduler", default="euler", choices=["ddim", "euler", "dpm"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--calls", type=int, default=1)
    ap.add_argument("--compile", default="off", help="off, or a torch.compile backend (inductor, eager)")
    args = ap.parse_args(argv)

    import torch

    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except ImportError:
        pass
    from stepscope.pipelines.sd import build_pipeline, default_size

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    pipe = build_pipeline(args.model, args.scheduler, device=args.device)
    dtype = getattr(torch, args.dtype)
    pipe.to(args.device, dtype)
    if args.compile != "off":
        pipe.unet = torch.compile(pipe.unet, backend=args.compile)
    sync()
    build_s = time.perf_counter() - t0
    size = args.size or default_size(args.model)
    prompt = ["a photograph of an astronaut riding a horse"] * args.batch

    def call() -> float:
        sync()
        t = time.perf_counter()
        pipe(prompt, num_inference_steps=args.steps, height=size, width=size,
             generator=torch.Generator().manual_seed(0))
        sync()
        return time.perf_counter() - t

    warm = [call() for _ in range(args.warmup)]
    calls = [call() for _ in range(args.calls)]
    out = {"calls_s": calls, "warmup_s": warm, "build_s": build_s, "device": args.device, "dtype": args.dtype,
           "size": size, "steps": args.steps}
    if args.device.startswith("cuda"):
        out["device_name"] = torch.cuda.get_device_name()
    if args.compile != "off":
        from torch._dynamo.utils import counters

        out["graphs"] = int(counters["stats"].get("unique_graphs", 0))
        out["graph_breaks"] = int(sum(counters["graph_break"].values()))
        out["frames"] = int(counters["frames"].get("ok", 0))
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
