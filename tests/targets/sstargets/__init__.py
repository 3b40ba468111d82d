"""Modules for the tracer's tests: every kind of callable the tracer must resolve and wrap."""
