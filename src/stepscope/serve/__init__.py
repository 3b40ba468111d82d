"""The long-running server: ``web/`` (the UI and the ingest endpoints, Starlette) and ``ingest/`` (Sentry envelopes,
the SDK's streamed spans and OTLP decoded into the store).
"""
