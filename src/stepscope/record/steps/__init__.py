"""Denoising steps: the one owner of what a step is (stdlib only; runs inside the program too).

- ``steps.rules``: the rules table (which functions open a step scope, which are one step, which loops' iterations
  are steps, which are scoped to the step), the span attribute names, and the rules read from span names
  (after the fact: ingested spans, the step table);
- ``steps.loops``: a sampler function's step loop, read from its source (``ast``);
- ``steps.hooks``: the live hooks the probes call (``tracing.probes``): scopes, markers, scoped denoisers and loop
  iterations as spans of their own;
- ``steps.after``: the same rules over spans recorded elsewhere (Sentry SDK, OTLP);
- the step table that reads the spans: ``analysis.steptable`` (it imports ``steps.rules`` only).

To add a sampler family: one ``Rule`` in ``steps.rules.RULES`` (and a line in docs/steps.md).
"""
