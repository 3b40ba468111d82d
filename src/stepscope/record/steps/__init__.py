"""Denoising steps in the program (stdlib only).

- the rules table (which functions open a step scope, which are one step, which loops' iterations are steps,
  which are scoped to the step) and the span attribute names: ``core.steprules`` (analysis reads it too);
- ``steps.loops``: a sampler function's step loop, read from its source (``ast``);
- ``steps.hooks``: the live hooks the probes call (``tracing.probes``): scopes, markers, scoped denoisers and loop
  iterations as spans of their own;
- ``steps.workfacts``: the pipeline's facts noted at its first call (arguments, components, attention), for
  ``diff``;
- the same rules over spans recorded elsewhere (Sentry SDK, OTLP): ``serve.ingest.steps``; the step table that
  reads the spans: ``analysis.steptable``.

To add a sampler family: one ``Rule`` in ``core.steprules.RULES`` (and a line in docs/steps.md).
"""
