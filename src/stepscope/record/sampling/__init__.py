"""Sampling profiler (collect side) and call trees over time windows (analysis side)."""
