"""Benchmarks of fixes: a configuration matrix run in isolated processes, interleaved, with honest statistics."""
