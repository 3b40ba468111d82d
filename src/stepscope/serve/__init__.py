"""The long-running server: ``web/`` (the UI and the ingest endpoints, Starlette) and ``ingest/`` (decoding Sentry envelopes and OTLP into the store)."""
