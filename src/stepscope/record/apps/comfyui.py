"""``--app comfyui``: the ComfyUI server (``Comfy-Org/ComfyUI``): one span per prompt, one per node execution named
by node type and id (custom nodes included: every node runs through ``execution.execute``), the sampler's steps (its
k-diffusion loops: ``core.steprules``), the model evaluation, text encoding, VAE and checkpoint loading.

Read from ComfyUI 0.3.x (``execution.py``): ``execute(server, dynprompt, caches, current_item, ...)`` (a coroutine
since 0.3.4x; earlier ``execute(server, prompt, outputs, current_item, ...)``) and
``PromptExecutor.execute(self, prompt, prompt_id, extra_data, execute_outputs)``. A node whose outputs are cached is
still handed to ``execute`` when it is an output, and returns at once: its span says ``node.cached``; nodes
cached upstream are never executed: a prompt's span gives its node count (``prompt.nodes``)."""

from __future__ import annotations

from . import Preset

PROMPT = "execution.PromptExecutor.execute"
NODE = "execution.execute"


def node_facts(loc: dict):
    """``(span name "CLASS_TYPE #ID", attrs)`` of a node execution from ``execution.execute``'s arguments."""
    nid = loc.get("current_item")
    if nid is None:
        nid = loc.get("unique_id")
    node = None
    dp = loc.get("dynprompt")
    if dp is not None:
        node = dp.get_node(nid)  # (a dict lookup in the prompt or its expanded nodes)
    elif isinstance(loc.get("prompt"), dict):
        node = loc["prompt"].get(nid)
    ctype = node.get("class_type") if isinstance(node, dict) else None
    attrs = {"node.id": str(nid)}
    if isinstance(ctype, str):
        attrs["node.type"] = ctype
    caches = loc.get("caches")
    cached = None
    if caches is not None:
        cached = caches.outputs.get(nid) is not None  # (execute's own first test)
    elif isinstance(loc.get("outputs"), dict):
        cached = nid in loc["outputs"]
    if cached is not None:
        attrs["node.cached"] = bool(cached)
    return (f"{ctype} #{nid}" if isinstance(ctype, str) else None), attrs


def prompt_facts(loc: dict):
    """``(None, attrs)`` of a prompt: its id and node count."""
    attrs = {}
    pid = loc.get("prompt_id")
    if isinstance(pid, (str, int)):
        attrs["prompt.id"] = str(pid)
    prompt = loc.get("prompt")
    if isinstance(prompt, dict):
        attrs["prompt.nodes"] = len(prompt)
    return None, attrs


PRESET = Preset(
    name="comfyui",
    description="ComfyUI: prompts, node executions by type and id, sampler steps, the model, CLIP, VAE, loading",
    traces=(
        PROMPT,
        NODE,
        "comfy.samplers.KSAMPLER.sample",
        "comfy.model_base.BaseModel.apply_model",
        "comfy.samplers.calc_cond_batch",
        "comfy.sd.CLIP.encode_from_tokens",
        "comfy.sd.VAE.decode",
        "comfy.sd.VAE.encode",
        "comfy.sd.load_checkpoint_guess_config",
        "comfy.model_management.load_models_gpu",
    ),
    facts={NODE: node_facts, PROMPT: prompt_facts},
    ops={NODE: "node", PROMPT: "prompt"},
)
