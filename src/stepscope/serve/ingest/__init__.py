"""Ingest of the Sentry SDK's envelopes: decode the body, split the envelope, turn transactions and
profiles into stepscope's runs, spans and samples on one clock, and write them (one writer)."""
