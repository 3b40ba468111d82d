"""A stand-in for diffusers with the shapes stepscope's step rules read (steps/hooks.py): a pipeline's
``__call__`` (a ``DiffusionPipeline``), a scheduler's ``step`` (a ``SchedulerMixin``), denoiser ``forward``s in
``diffusers.models.unets`` and ``diffusers.models.transformers``, the UNet's blocks and transformers nested in it."""
