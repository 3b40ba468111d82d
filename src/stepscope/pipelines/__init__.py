"""Stable Diffusion pipelines built offline: random weights from configs, or a local model folder.

Nothing here is imported by the core; diffusers, transformers and torch load on first use.
"""
