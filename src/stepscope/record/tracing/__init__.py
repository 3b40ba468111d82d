"""Spans: the context that nests them, wrappers that record them, and patching by qualified name."""
