"""The nodes: importing this package registers every node class (``late`` is imported later by main)."""
from . import basic, text  # noqa: F401
