"""The step rules: which functions make denoising steps, in one table (stdlib only).

A rule names functions by their defining module and qualified name (``fnmatch`` patterns over
``module.Qualname``) or, for diffusers, by class hierarchy (a user's subclass of ``DiffusionPipeline`` counts
too). Each has a *kind*:

- ``scope``: each call numbers its steps from 0 (a diffusers pipeline's ``__call__``);
- ``loop``: a scope whose steps are the iterations of its own step loop (``steps.loops``): one span per
  iteration, named ``<function> step`` with op ``step``, from the loop's head to the next iteration's head, so
  that everything the iteration runs (model evaluations, callbacks, live previews) belongs to it. A function
  of the table without a loop of its own (a sampler that calls another) is a plain ``scope``;
- ``marker``: each call is one step, tagged with the scope's counter, which advances when it returns (a diffusers
  scheduler's ``step``; ``--step NAME`` / ``steps = [...]`` in ``traces.toml`` for any other loop);
- ``scoped``: a call that belongs to the current step (a diffusers denoiser's ``forward``; see ``steps.hooks``).

The loops users run (``RULES``): diffusers pipelines; k-diffusion's ``sample_*`` functions (the package, and
ComfyUI's copy ``comfy.k_diffusion.sampling``, which ``comfy.samplers.KSAMPLER`` calls for every KSampler
node); ComfyUI's UniPC; ldm's DDIM/PLMS/DPM-Solver samplers (Stable Diffusion's original repos, A1111's
``repositories/``); sgm's samplers (SDXL's ``generative-models``); A1111's own timestep samplers; InvokeAI's
denoising loops (its own pipeline over diffusers' schedulers, whose ``step`` spans then nest in its steps). The loop
rules are traced by every ``stepscope run`` whose program imports those modules (``LOOP_TRACES``): one span
per sampler call and per step.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass

#: The span attribute with a denoising step's index (0-based in its scope).
STEP_ATTR = "diffusion.step"
#: Set (True) on a step-level span inside another one of the same step (a UNet's blocks): not a step of its own.
NESTED_ATTR = "diffusion.nested"
#: a step-level span's (or sampler-loop iteration's) thread CPU-wait counter at its entry, and its own wait, ns
#: (``record.steps.cpuwait``, ``analysis.cpuwait``)
WAIT_IN, WAIT_NS = "cpu.wait_in", "cpu.wait_ns"
#: The op of a loop iteration's span (``loop`` rules).
STEP_OP = "step"
#: A loop iteration's span name: the sampler's name and this suffix.
STEP_SUFFIX = " step"

#: Modules whose ``forward`` is a diffusers denoiser.
DENOISER_MODULES = ("diffusers.models.unets", "diffusers.models.transformers", "diffusers.models.controlnets",
                    "diffusers.models.controlnet")


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the table. ``family``: whose loop ("diffusers", "k-diffusion", "comfyui", "ldm", "sgm",
    "a1111"); ``kind``: "scope", "loop", "marker" or "scoped"; ``pattern``: ``fnmatch`` pattern over the
    defining ``module.Qualname`` (for diffusers: over span names, the class rules being live)."""

    family: str
    kind: str
    pattern: str


RULES: tuple[Rule, ...] = (
    Rule("diffusers", "scope", "diffusers.pipelines.*.__call__"),
    Rule("diffusers", "marker", "diffusers.schedulers.*.step"),
    *(Rule("diffusers", "scoped", m + ".*.forward") for m in DENOISER_MODULES),
    Rule("k-diffusion", "loop", "k_diffusion.sampling.sample_*"),
    Rule("k-diffusion", "loop", "k_diffusion.sampling.DPMSolver.dpm_solver_fast"),
    Rule("k-diffusion", "loop", "k_diffusion.sampling.DPMSolver.dpm_solver_adaptive"),
    Rule("comfyui", "loop", "comfy.k_diffusion.sampling.sample_*"),
    Rule("comfyui", "loop", "comfy.k_diffusion.sampling.generic_step_sampler"),
    Rule("comfyui", "loop", "comfy.k_diffusion.sampling.res_multistep"),
    Rule("comfyui", "loop", "comfy.k_diffusion.sampling.DPMSolver.dpm_solver_fast"),
    Rule("comfyui", "loop", "comfy.k_diffusion.sampling.DPMSolver.dpm_solver_adaptive"),
    Rule("comfyui", "loop", "comfy.extra_samplers.uni_pc.UniPC.sample"),
    Rule("ldm", "loop", "ldm.models.diffusion.ddim.DDIMSampler.ddim_sampling"),
    Rule("ldm", "loop", "ldm.models.diffusion.plms.PLMSSampler.plms_sampling"),
    Rule("ldm", "loop", "ldm.models.diffusion.dpm_solver.dpm_solver.DPM_Solver.sample"),
    Rule("sgm", "loop", "sgm.modules.diffusionmodules.sampling.*Sampler.__call__"),
    Rule("a1111", "loop", "modules.sd_samplers_timesteps_impl.*"),
    Rule("invokeai", "loop", "invokeai.backend.stable_diffusion.diffusers_pipeline.StableDiffusionGeneratorPipeline"
                             ".latents_from_embeddings"),
    Rule("invokeai", "loop", "invokeai.backend.stable_diffusion.diffusion_backend.StableDiffusionBackend"
                             ".latents_from_embeddings"),
    Rule("invokeai", "loop", "invokeai.backend.stable_diffusion.multi_diffusion_pipeline.MultiDiffusionPipeline"
                             ".multi_diffusion_denoise"),
)

#: What ``stepscope run`` traces for the loop rules (quietly: a program that never imports them is told nothing):
#: module-level patterns as trace names (globs resolve as the modules import).
LOOP_TRACES: tuple[str, ...] = tuple(r.pattern for r in RULES if r.kind == "loop")


@functools.lru_cache(maxsize=4096)
def loop_rule(qualified: str) -> Rule | None:
    """The ``loop`` rule for a function named by its defining ``module.Qualname``, or None."""
    for r in RULES:
        if r.kind == "loop" and fnmatch.fnmatchcase(qualified, r.pattern):
            return r
    return None


@functools.lru_cache(maxsize=4096)
def kind_of_name(name: str) -> str | None:
    """The rule for a span named by its qualified name (``module.Class.method``, the defining module, as the
    Sentry SDK names ``functions_to_trace`` spans): "scope", "loop", "marker", "scoped", "step" (a loop
    iteration's span) or None. Read from the name, since there is no class to look at."""
    if name.endswith(STEP_SUFFIX) and loop_rule(name[: -len(STEP_SUFFIX)]) is not None:
        return "step"
    if name.startswith("diffusers.pipelines.") and name.endswith(".__call__"):
        return "scope"
    if name.startswith("diffusers.schedulers.") and name.endswith(".step"):
        return "marker"
    if name.startswith(tuple(m + "." for m in DENOISER_MODULES)) and name.endswith(".forward"):
        return "scoped"
    if loop_rule(name) is not None:
        return "loop"
    return None


def is_call_name(name: str) -> bool:
    """A span name that numbers steps from 0 (a pipeline call, a sampler call: ``scope``/``loop`` rules), or a
    traced ``...Pipeline...__call__`` of any package."""
    return kind_of_name(name) in ("scope", "loop") or (name.endswith(".__call__") and "Pipeline" in name)
