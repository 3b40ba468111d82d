"""Exports of a recorded run to other tools' formats: speedscope, Chrome trace (Perfetto)."""

from .chrome import to_chrome_trace, write_chrome_trace
from .speedscope import to_speedscope, write_speedscope

FORMATS = {"speedscope": to_speedscope, "chrome": to_chrome_trace}
#: the same documents, streamed to a binary file: ``(data, out, index=None[, device])`` -> bytes written
WRITERS = {"speedscope": write_speedscope, "chrome": write_chrome_trace}

__all__ = ["FORMATS", "WRITERS", "to_chrome_trace", "to_speedscope", "write_chrome_trace", "write_speedscope"]
