"""The outermost denoiser calls (tests/test_native_recorder.py): an untraced pipeline of 3 steps whose UNet is called
twice a step (its steps counted by their timestep objects); an outermost transformer that raises, caught; then, in a
thread, a pipeline of 2 steps."""

import threading

from diffusers.models.transformers.transformer_2d import Transformer2DModel
from diffusers.pipelines.pipeline_fake import FakePipeline

print(FakePipeline()(3))
try:
    Transformer2DModel().forward(1, fail=True)
except ValueError as e:
    print(e)
t = threading.Thread(target=lambda: print(FakePipeline()(2)))
t.start()
t.join()
