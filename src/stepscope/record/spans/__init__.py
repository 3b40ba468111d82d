"""The recording's spans in memory: the span buffer and the current span (``buffer``), and span names read from a call's arguments (``labels``)."""
