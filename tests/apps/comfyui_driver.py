"""Drive a ComfyUI server for app tests and start-up measurements: no ComfyUI code here, only its HTTP API.

1. A random-weight SD1.5-shaped checkpoint that ComfyUI's model detection takes for SD15
   (``comfy.model_detection.detect_unet_config`` reads the UNet's config from tensor shapes, and
   ``supported_models.SD15`` matches on model_channels 320, context_dim 768, no linear proj_in, no ADM, no
   temporal layers only: the number of levels, res blocks and transformer blocks is free). The UNet is cut to one
   level (channel_mult [1], one res block, one transformer block per block, a middle block): about 20M
   parameters instead of 860M. The CLIP-L text encoder (123M) and the SD VAE (84M) are built by ComfyUI from fixed
   configs, so they are full size. The tensors are made by ComfyUI's own classes in the ComfyUI Python (names
   and shapes), filled with seeded random values (weights N(0, 1/fan_in), norms 1, biases 0), written once in
   fp16 (about 0.45 GB) to the cache (``--cache``, default ``$COMFYUI_DRIVER_CACHE`` or
   ``~/.cache/stepscope/comfyui``) and linked into ``COMFYUI_DIR/models/checkpoints``; the detection is checked
   before it is written.
2. ``python main.py --cpu --listen 127.0.0.1 --port P`` in COMFYUI_DIR, after ``--prefix`` if given (a command
   such as ``python -m stepscope run --trace NAME --``), in a session of its own; the time until its HTTP server
   answers ``/system_stats`` (a deadline, polled).
3. ``--prompts N`` prompts of a txt2img workflow (CheckpointLoaderSimple, two CLIPTextEncode, EmptyLatentImage
   64x64, KSampler euler 8 steps, VAEDecode, SaveImage) posted to ``/prompt`` one after the other, each waited
   for on ``/history/<id>``; a new seed each, so that only the sampler and what follows it run again (ComfyUI
   caches the outputs of nodes whose inputs did not change: the first prompt also loads the checkpoint and
   encodes the texts).
4. SIGINT to the server's process group (Ctrl-C in its terminal), its exit awaited.

Printed: the time to ready, each prompt's time, the exit; ``--json``: one JSON line at the end too.
When the ComfyUI Python cannot import torchvision (ComfyUI imports it at start-up in
comfy/ldm/cascade/stage_c_coder.py, and uses it only in nodes an SD1.5 txt2img never runs; the registry's
builds are CUDA ones that do not load with a CPU torch), a stub package is put first on the server's
PYTHONPATH: importing it works, using anything in it raises.

    COMFYUI_DIR=/work/comfyui /work/.venv-comfy/bin/python tests/apps/comfyui_driver.py --prompts 3
    PYTHONPATH=$PWD/src COMFYUI_DIR=/work/comfyui /work/.venv-comfy/bin/python tests/apps/comfyui_driver.py \\
        --prefix "/work/.venv-comfy/bin/python -m stepscope run -q --trace execution.execute --"
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

CHECKPOINT = "stepscope-tiny-sd15.safetensors"
#: the UNet config ComfyUI detects from the written shapes (checked before writing)
TINY_UNET = {"use_checkpoint": False, "image_size": 32, "out_channels": 4, "use_spatial_transformer": True,
             "legacy": False, "adm_in_channels": None, "in_channels": 4, "model_channels": 320, "num_res_blocks": [1],
             "transformer_depth": [1], "transformer_depth_output": [1, 1], "channel_mult": [1],
             "transformer_depth_middle": 1, "use_linear_in_transformer": False, "context_dim": 768,
             "use_temporal_resblock": False, "use_temporal_attention": False}
STUB = {"__init__.py": '''"""A stub of torchvision for ComfyUI's start-up (tests/apps/comfyui_driver.py): importable, unusable."""
__version__ = "0.0.0+stub"


class _Missing:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return _Missing(f"{self._name}.{attr}")

    def __call__(self, *a, **k):
        raise RuntimeError(f"{self._name}: torchvision is a stub here (tests/apps/comfyui_driver.py)")


def __getattr__(name):
    return _Missing(f"torchvision.{name}")
''', "transforms/__init__.py": '''from .. import _Missing


def __getattr__(name):
    return _Missing(f"torchvision.transforms.{name}")
''', "models/__init__.py": '''from .. import _Missing


def __getattr__(name):
    return _Missing(f"torchvision.models.{name}")
'''}


SLOW_NODE = "stepscope_slow_step.py"
#: A custom node for ``--slow-step``: the model patched so that one denoising step (by the sigma ComfyUI is at
#: among ``transformer_options["sample_sigmas"]``) runs 2 s of Python more, as a slow preview or a custom
#: node's hook would.
SLOW_NODE_SOURCE = '''"""stepscope's app test: a model patch that makes one denoising step slow (tests/apps/comfyui_driver.py)."""
import time


def busy_preview(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


class StepscopeSlowStep:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "step": ("INT", {"default": -1, "min": -1, "max": 10000})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "testing"

    def patch(self, model, step):
        m = model.clone()

        def wrapper(apply_model, args):
            t = args["timestep"]
            sig = (args.get("c") or {}).get("transformer_options", {}).get("sample_sigmas")
            if step >= 0 and sig is not None and int((sig - t[0]).abs().argmin()) == step:
                busy_preview(2.0)
            return apply_model(args["input"], t, **args["c"])

        m.set_model_unet_function_wrapper(wrapper)
        return (m,)


NODE_CLASS_MAPPINGS = {"StepscopeSlowStep": StepscopeSlowStep}
'''


def workflow(seed: int, steps: int, size: int, slow_step: int | None = None) -> dict:
    """The API-format prompt: node id -> class_type and inputs ([node id, output index] for links); with
    ``slow_step`` (-1: none), the model goes through ``StepscopeSlowStep`` (node 10) to the KSampler."""
    extra = {}
    model = ["4", 0]
    if slow_step is not None:
        extra = {"10": {"class_type": "StepscopeSlowStep", "inputs": {"model": ["4", 0], "step": slow_step}}}
        model = ["10", 0]
    return {**extra,
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": CHECKPOINT}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a photo of a cat", "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": size, "height": size, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"seed": seed, "steps": steps, "cfg": 7.0, "sampler_name": "euler",
                                                   "scheduler": "normal", "denoise": 1.0, "model": model,
                                                   "positive": ["6", 0], "negative": ["7", 0],
                                                   "latent_image": ["5", 0]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "stepscope", "images": ["8", 0]}},
    }


# -- the checkpoint ----------------------------------------------------------------------------------------
MAKE = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
out, unet_config = sys.argv[2], __import__("json").loads(sys.argv[3])
import comfy.cli_args
comfy.cli_args.args.cpu = True  # as main.py --cpu (no CUDA device looked for)
import comfy.ops, comfy.sd1_clip, comfy.model_detection, comfy.supported_models
from comfy.ldm.modules.diffusionmodules.openaimodel import UNetModel
from comfy.ldm.models.autoencoder import AutoencoderKL
from safetensors.torch import save_file
ops = comfy.ops.disable_weight_init
cfg = comfy.supported_models.SD15(unet_config).unet_config
with torch.device("meta"):  # names and shapes only
    parts = {"model.diffusion_model.": UNetModel(**cfg, operations=ops),
             "cond_stage_model.": comfy.sd1_clip.SDClipModel(),
             "first_stage_model.": AutoencoderKL(ddconfig={"double_z": True, "z_channels": 4, "resolution": 256,
                 "in_channels": 3, "out_ch": 3, "ch": 128, "ch_mult": [1, 2, 4, 4], "num_res_blocks": 2,
                 "attn_resolutions": [], "dropout": 0.0}, embed_dim=4)}
gen = torch.Generator().manual_seed(0)
sd = {}
for prefix, module in parts.items():
    for name, t in module.state_dict().items():
        key = prefix + name
        if "position_ids" in name:
            sd[key] = torch.arange(t.shape[-1]).expand(t.shape).to(t.dtype)
        elif not t.is_floating_point():
            sd[key] = torch.zeros(t.shape, dtype=t.dtype)
        elif t.dim() >= 2:
            fan_in = t[0].numel()
            std = 0.02 if "embedding" in name else fan_in ** -0.5
            sd[key] = (torch.randn(t.shape, generator=gen) * std).half()
        elif name.endswith("weight") or "scale" in name:
            sd[key] = torch.ones(t.shape, dtype=torch.float16)
        else:
            sd[key] = torch.zeros(t.shape, dtype=torch.float16)
sd = {k: v.contiguous() for k, v in sd.items()}
detected = comfy.model_detection.model_config_from_unet(sd, "model.diffusion_model.")
assert type(detected) is comfy.supported_models.SD15, f"detected as {type(detected).__name__}"
for k, v in unet_config.items():
    assert detected.unet_config.get(k) == v, (k, detected.unet_config.get(k), v)
save_file(sd, out, metadata={"made_by": "tests/apps/comfyui_driver.py"})
params = {p: sum(v.numel() for k, v in sd.items() if k.startswith(p)) for p in parts}
print(__import__("json").dumps(params))
'''


def ensure_checkpoint(comfy: Path, python: str, cache: Path, env: dict) -> Path:
    """The checkpoint in the cache (made once) and linked into COMFYUI_DIR/models/checkpoints."""
    cache.mkdir(parents=True, exist_ok=True)
    cached = cache / CHECKPOINT
    if not cached.exists():
        t = time.perf_counter()
        tmp = cached.with_suffix(".partial")
        r = subprocess.run([python, "-c", MAKE, str(comfy), str(tmp), json.dumps(TINY_UNET)], capture_output=True,
                           text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"making the checkpoint failed:\n{r.stderr[-4000:]}")
        tmp.rename(cached)
        print(f"checkpoint: {cached} ({cached.stat().st_size / 2**20:.0f} MiB, parameters "
              f"{r.stdout.strip().splitlines()[-1]}) made in {time.perf_counter() - t:.1f} s", flush=True)
    target = comfy / "models" / "checkpoints" / CHECKPOINT
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(cached, target)
        except OSError:
            target.symlink_to(cached)
    return target


def stub_dir(python: str, cache: Path) -> Path | None:
    """A directory holding the torchvision stub, when ``python`` cannot import torchvision."""
    if subprocess.run([python, "-c", "import torchvision"], capture_output=True).returncode == 0:
        return None
    root = cache / "stubs"
    for rel, text in STUB.items():
        p = root / "torchvision" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
    return root


# -- the server ---------------------------------------------------------------------------------------------
def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def _post(url: str, body: dict, timeout: float = 30.0):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"POST {url}: {e.code} {e.read()[:4000].decode(errors='replace')}")


def wait_ready(base: str, proc: subprocess.Popen, deadline: float) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before it was ready")
        try:
            _get(base + "/system_stats", timeout=2)
            return time.perf_counter() - t0
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            time.sleep(0.05)
    raise TimeoutError("the server was not ready in time")


def run_prompt(base: str, prompt: dict, deadline: float) -> tuple[float, dict]:
    t0 = time.perf_counter()
    pid = _post(base + "/prompt", {"prompt": prompt, "client_id": str(uuid.uuid4())})["prompt_id"]
    while time.perf_counter() < deadline:
        h = _get(f"{base}/history/{pid}")
        if h and pid in h and h[pid].get("status", {}).get("completed") is not None:
            if h[pid]["status"].get("status_str") != "success":
                raise RuntimeError(f"prompt {pid} failed: {json.dumps(h[pid]['status'])[:4000]}")
            return time.perf_counter() - t0, h[pid]
        time.sleep(0.02)
    raise TimeoutError(f"prompt {pid} did not finish in time")


def stop(proc: subprocess.Popen, timeout: float) -> tuple[int | None, float]:
    """SIGINT to the server's process group; its exit status and how long it took."""
    t0 = time.perf_counter()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, time.perf_counter() - t0
    return proc.returncode, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comfyui", default=os.environ.get("COMFYUI_DIR"), help="ComfyUI's checkout ($COMFYUI_DIR)")
    ap.add_argument("--python", default=os.environ.get("COMFYUI_PYTHON", sys.executable),
                    help="the Python that runs ComfyUI ($COMFYUI_PYTHON; default: this one)")
    ap.add_argument("--prefix", default="", help="a command before `python main.py ...`, split as a shell would")
    ap.add_argument("--port", type=int, default=0, help="default: a free one")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--ready-timeout", type=float, default=600.0)
    ap.add_argument("--prompt-timeout", type=float, default=600.0)
    ap.add_argument("--cache", default=os.environ.get("COMFYUI_DRIVER_CACHE",
                                                      str(Path.home() / ".cache" / "stepscope" / "comfyui")))
    ap.add_argument("--log", help="write the server's output here (default: a temporary file, printed on failure)")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    ap.add_argument("--slow-step", type=int, default=None, help="make this denoising step slow (a custom node, "
                    "custom_nodes/stepscope_slow_step.py, written for the run and removed after)")
    ap.add_argument("--slow-prompt", type=int, default=1, help="in this prompt (0-based; the others: no slow step)")
    args = ap.parse_args()
    if not args.comfyui:
        ap.error("set COMFYUI_DIR or --comfyui")
    comfy = Path(args.comfyui).resolve()
    cache = Path(args.cache)
    env = dict(os.environ)
    stubs = stub_dir(args.python, cache)
    if stubs is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(stubs), *filter(None, [env.get("PYTHONPATH")])])
    ensure_checkpoint(comfy, args.python, cache, env)
    port = args.port
    if not port:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    slow_file = comfy / "custom_nodes" / SLOW_NODE
    if args.slow_step is not None:
        slow_file.write_text(SLOW_NODE_SOURCE)
    out_dir = tempfile.mkdtemp(prefix="comfyui-out-")
    cmd = [*shlex.split(args.prefix), args.python, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(port),
           "--output-directory", out_dir]
    log = open(args.log, "w+") if args.log else tempfile.TemporaryFile("w+")
    base = f"http://127.0.0.1:{port}"
    figures: dict = {"cmd": cmd, "prompts": []}
    t_start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=comfy, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        figures["ready_s"] = wait_ready(base, proc, t_start + args.ready_timeout)
        print(f"ready in {figures['ready_s']:.2f} s ({' '.join(cmd)})", flush=True)
        for i in range(args.prompts):
            slow = None if args.slow_step is None else args.slow_step if i == args.slow_prompt else -1
            wall, hist = run_prompt(base, workflow(random.Random(i).randrange(2**32), args.steps, args.size, slow),
                                    time.perf_counter() + args.prompt_timeout)
            images = [im["filename"] for o in hist.get("outputs", {}).values() for im in o.get("images", [])]
            figures["prompts"].append(wall)
            print(f"prompt {i}: {wall:.2f} s ({', '.join(images)})", flush=True)
    except BaseException as e:
        stop(proc, 30)
        slow_file.unlink(missing_ok=True)
        log.seek(0)
        sys.stderr.write(log.read()[-8000:])
        print(f"failed: {e!r}", file=sys.stderr)
        return 1
    figures["exit"], figures["stop_s"] = stop(proc, 120)
    slow_file.unlink(missing_ok=True)
    print(f"stopped by SIGINT: exit {figures['exit']} in {figures['stop_s']:.2f} s", flush=True)
    if args.json:
        print(json.dumps(figures))
    return 0 if figures["exit"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
