"""Denoisers inside denoisers (tests/test_native_recorder.py): a pipeline of 3 steps whose UNet (called twice a
step) holds blocks holding transformers (one raises, caught in its block); then a transformer as the outermost
denoiser, called alone; then, in a thread, a pipeline of 2 steps."""

import threading

from diffusers.models.transformers.transformer_2d import Transformer2DModel
from diffusers.pipelines.pipeline_fake import FakePipeline

print(FakePipeline()(3))
print(Transformer2DModel().forward(1))
t = threading.Thread(target=lambda: print(FakePipeline()(2)))
t.start()
t.join()
