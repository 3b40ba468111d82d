"""Memory on the run clock, recorded in the program: the memory lane (RSS, CUDA allocator bytes), the step-level
spans' readings and CUDA's memory history (``history``), and the allocator snapshot summarised for the
out-of-memory record (``snapshot``).
"""
