"""The nodes: importing this package registers every node class."""
from . import compel, denoise, latents, noise  # noqa: F401
