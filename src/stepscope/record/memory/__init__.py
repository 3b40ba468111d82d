"""Memory on the run clock: the memory lane (``history``) and CUDA memory snapshots (``snapshot``)."""
