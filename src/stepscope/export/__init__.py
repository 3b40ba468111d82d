"""Exports of a recorded run to other tools' formats: speedscope, Chrome trace (Perfetto)."""

from .chrome import to_chrome_trace
from .speedscope import to_speedscope

FORMATS = {"speedscope": to_speedscope, "chrome": to_chrome_trace}

__all__ = ["FORMATS", "to_chrome_trace", "to_speedscope"]
