"""What stepscope writes for people and other tools: ``terminal/`` (rich tables), ``html/`` (the report), ``export/`` (Chrome/Perfetto, speedscope, OTLP, Sentry)."""
