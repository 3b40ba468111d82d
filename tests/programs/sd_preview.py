"""A user's txt2img script: the tiny pipeline, with a ``callback_on_step_end`` that renders a preview of the
latents and PNG-encodes it every 4th step (steps 3, 7, 11 of 12), as UIs that stream previews do."""
import argparse
import io

import numpy as np

from stepscope.pipelines.sd import build_pipeline

PREVIEW_PX = 960


def encode_png(pixels: np.ndarray) -> bytes:
    """The preview as PNG bytes (what a UI would send to the browser)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG", compress_level=9)
    return buf.getvalue()


def render_preview(latents) -> bytes:
    """Latents -> an RGB preview, scaled up to PREVIEW_PX, PNG-encoded."""
    x = latents[0, :3].float().numpy()
    x = (x - x.min()) / max(float(x.max() - x.min()), 1e-6)
    img = (x.transpose(1, 2, 0) * 255).astype(np.uint8)
    k = PREVIEW_PX // img.shape[0]
    img = img.repeat(k, 0).repeat(k, 1)
    noise = np.random.default_rng(0).integers(0, 24, img.shape, dtype=np.uint8)  # dithering: real previews have texture
    return encode_png(img + noise)


EVERY = 4
previews: list[bytes] = []


def on_step_end(pipe, i, t, kw):
    """``callback_on_step_end``: a preview every EVERY-th step."""
    if i % EVERY == EVERY - 1:
        previews.append(render_preview(kw["latents"]))
    return kw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # steady step times on a shared machine (2 cores, other jobs)
    pipe = build_pipeline("tiny", "ddim")
    out = pipe("a cat", num_inference_steps=args.steps, height=64, width=64, callback_on_step_end=on_step_end,
               callback_on_step_end_tensor_inputs=["latents"])
    print("image", out.images[0].size, "previews", len(previews))


if __name__ == "__main__":
    main()
