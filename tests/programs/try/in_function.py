"""The pipeline is built inside a function, then called twice with different prompts; a callback prints."""
import torch
from diffusers.models.attention_processor import AttnProcessor

from stepscope.pipelines.sd import build_pipeline


def make():
    pipe = build_pipeline("tiny", scheduler="euler")
    pipe.unet.set_attn_processor(AttnProcessor())
    return pipe


def on_step(pipe, i, t, kw):
    print("step", i)
    return kw


def main():
    pipe = make()
    for prompt in ("a cat", "a dog"):
        img = pipe(prompt, height=32, width=32, num_inference_steps=3, output_type="np",
                   callback_on_step_end=on_step).images
        print(prompt, img.shape)
    print("processors:", sorted({type(p).__name__ for p in pipe.unet.attn_processors.values()}))


if __name__ == "__main__":
    main()
