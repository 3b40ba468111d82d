"""What stepscope writes for people and other tools; it draws what ``analysis`` and ``device`` return and
computes nothing of its own:

- ``terminal/``: rich tables for the CLI;
- ``html/``: the HTML report (a view model and its page), the compare page, the shared page templating;
- ``export/``: a run in other tools' formats (speedscope, Chrome/Perfetto, OTLP, Sentry envelopes), written or
  sent;
- ``markdown/``: GitHub-flavoured Markdown for a CI job's summary (``diff --format markdown``).
"""
