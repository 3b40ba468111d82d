"""A stand-in for k-diffusion's package layout (``k_diffusion.sampling.sample_*``), with its samplers' loops as
written there (pure Python numbers instead of tensors), for the step rules' tests (steps/rules.py)."""
