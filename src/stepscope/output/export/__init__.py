"""Exports of a recorded run to other tools' formats, written to a file as they are made from the span columns, or
sent:

- ``speedscope``, ``chrome``: speedscope's file format and the Chrome Trace Event Format (Perfetto), with a job's
  processes apart (``procs``); ``FORMATS`` gives the document, ``WRITERS`` streams it to a file;
- ``otlp_encode``, ``otlp_json``, ``otlp_http``: a run as OpenTelemetry traces: the protobuf requests, an OTLP/JSON
  file, and the requests sent to a collector (OTLP/HTTP);
- ``sentry_out``: a run as Sentry envelopes (transactions and profile chunks) posted to a DSN;
- ``send``: ``stepscope export --format otlp|sentry`` and ``stepscope run --export``: a stored run sent to a
  target.

The OTLP and Sentry modules import their clients on use.
"""

from .chrome import to_chrome_trace, write_chrome_trace
from .speedscope import to_speedscope, write_speedscope

FORMATS = {"speedscope": to_speedscope, "chrome": to_chrome_trace}
#: the same documents, streamed to a binary file: ``(data, out, index=None[, device])`` -> bytes written
WRITERS = {"speedscope": write_speedscope, "chrome": write_chrome_trace}

__all__ = ["FORMATS", "WRITERS", "to_chrome_trace", "to_speedscope", "write_chrome_trace", "write_speedscope"]
