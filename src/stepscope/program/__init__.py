"""Capture on demand from a running process: a control server inside it, and the client side."""
