"""A txt2img script on a machine that another process makes busy at one step: the tiny pipeline (its UNet all CPU,
one thread), a step callback that is slow at ``--slow`` (0.3 s of its own CPU time: the program's doing), and at
``--busy`` a competing process spinning on the very CPU this thread runs on (both pinned to it), from that step's
start to its end: that step takes longer only because its thread waited for the CPU."""
import argparse
import os
import subprocess
import time

import torch

from stepscope.pipelines.sd import build_pipeline


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--slow", type=int, default=2)
    ap.add_argument("--busy", type=int, default=6)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # (this thread: Linux applies it to the calling thread)
    # the competitor waits on its stdin until told to spin; pinned to the same CPU
    spinner = subprocess.Popen(["sh", "-c", "read x; while :; do :; done"], stdin=subprocess.PIPE)
    os.sched_setaffinity(spinner.pid, {cpu})
    pipe = build_pipeline("tiny", "ddim")

    def on_step_end(pipe, i, t, kw):
        if i == a.slow:
            end = time.thread_time() + 0.3
            while time.thread_time() < end:
                pass
        if i == a.busy - 1:  # the next step runs beside it
            spinner.stdin.write(b"go\n")
            spinner.stdin.flush()
        if i == a.busy:
            spinner.kill()
        return kw

    try:
        out = pipe("a cat", num_inference_steps=a.steps, height=64, width=64, callback_on_step_end=on_step_end,
                   callback_on_step_end_tensor_inputs=["latents"])
    finally:
        spinner.kill()
        spinner.wait()
    print("image", out.images[0].size)


if __name__ == "__main__":
    main()
