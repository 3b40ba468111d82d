"""``stepscope bench``: a matrix of configurations (Stable Diffusion settings, or any command) run in isolated
processes, interleaved, with honest statistics.

- ``spec``: the matrix (CLI lists, TOML ``[matrix]`` or ``[[config]]``) and its baselines;
- ``matrix``: runs it: a worker process per configuration (``worker``), untimed warm-up, interleaved repeats,
  each run stored at once (``store.bench``);
- ``worker``: one configuration in its own process, driven by JSON lines on stdin/stdout;
- ``stats``, ``results``: bootstrap CIs of medians and changes, and a stored benchmark's verdict table;
- ``plots``: the per-run plot (matplotlib), also for ``stepscope try``'s benchmarks;
- ``maxbatch``: ``bench sd --max-batch/--max-size``, the largest batch or size that fits.

``stepscope try`` (fixes applied to the user's own program) is ``stepscope.fixes``; it stores and reports its
benchmarks with this package's statistics and plots.
"""
