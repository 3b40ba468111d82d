"""Terminal renderers (rich tables), one module per thing shown: the run summary (``summary``), the list of runs
(``runs``: no numpy), memory, explain and suggest, diff and the differential tree, device, processes and ranks,
nodes, benchmarks, ``try``, max-batch; ``cells``: the shared cell helpers. They draw analysis results and compute
nothing of their own.
"""
