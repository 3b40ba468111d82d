"""The stand-in server: a prompt worker thread takes prompts from a queue (idle while it waits), as ComfyUI's
main.py does; the main thread queues ``--prompts`` txt2img prompts (new seed each) and waits for them."""
import argparse
import queue
import threading
import time

import execution


def graph(seed, steps, slow_step):
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["4", 1], "text": "a red fox in the snow"}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["4", 1], "text": "blurry"}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "seed": seed, "steps": steps, "positive": ["6", 0],
                                                   "negative": ["7", 0], "latent_image": ["5", 0],
                                                   "slow_step": slow_step}},
        "8": {"class_type": "VAEDecode", "inputs": {"vae": ["4", 2], "samples": ["3", 0]}},
        "9": {"class_type": "SaveImage", "inputs": {"images": ["8", 0]}},
    }


def prompt_worker(q, done):
    e = execution.PromptExecutor()
    while True:
        item = q.get(timeout=30)
        if item is None:
            return
        e.execute(item[1], item[0], {}, ["9"])
        done.append(item[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--slow-step", type=int, default=-1)
    ap.add_argument("--slow-prompt", type=int, default=1)
    a = ap.parse_args()
    q, done = queue.Queue(), []
    t = threading.Thread(target=prompt_worker, args=(q, done), name="prompt_worker")
    t.start()
    time.sleep(0.05)  # the server idle before the first prompt
    for k in range(a.prompts):
        q.put((f"prompt-{k}", graph(k, a.steps, a.slow_step if k == a.slow_prompt else -1)))
    q.put(None)
    t.join()
    print("prompts done:", len(done))


if __name__ == "__main__":
    main()
