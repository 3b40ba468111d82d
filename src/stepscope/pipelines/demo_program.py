"""The demo program that ``stepscope demo`` runs (an ordinary script: it knows nothing of stepscope).

python -m stepscope.pipelines.demo_program --model tiny --steps 10 --size 64 --out image.png
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="txt2img with a Stable Diffusion pipeline built offline")
    ap.add_argument("--model", default="tiny", help="tiny, sd15 or a local diffusers folder")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", type=int, default=None, help="image size in px (default: the model's)")
    ap.add_argument("--scheduler", default="ddim", choices=["ddim", "euler", "dpm"])
    ap.add_argument("--prompt", default="a photograph of an astronaut riding a horse")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--guidance", type=float, default=7.5)
    ap.add_argument("--out", default=None, help="where to save the image (PNG)")
    ap.add_argument("--compile", default="off", help="torch.compile the UNet: off, or a backend (eager, inductor...)")
    args = ap.parse_args(argv)

    import torch

    try:  # the demo's own output: no third-party advice (transformers' "requires torchvision" warnings)
        import transformers

        transformers.logging.set_verbosity_error()
    except ImportError:
        pass
    from stepscope.pipelines.sd import build_pipeline, default_size

    t0 = time.perf_counter()
    pipe = build_pipeline(args.model, args.scheduler, seed=args.seed)
    if args.compile != "off":
        pipe.unet = torch.compile(pipe.unet, backend=args.compile)
    t1, c1 = time.perf_counter(), time.process_time()
    size = args.size or default_size(args.model)
    image = pipe(args.prompt, num_inference_steps=args.steps, height=size, width=size, guidance_scale=args.guidance,
                 generator=torch.Generator().manual_seed(args.seed)).images[0]
    t2, c2 = time.perf_counter(), time.process_time()
    print(f"built {args.model} pipeline in {t1 - t0:.2f} s; {args.steps} steps at {size} px in {t2 - t1:.4f} s "
          f"(CPU {c2 - c1:.4f} s)")
    if args.out:  # (`stepscope demo` moves it into the run's folder and prints where)
        image.save(args.out)


if __name__ == "__main__":
    main()
