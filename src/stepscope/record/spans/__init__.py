"""The recording's spans in memory: the span buffer and the current span (``buffer``), the fields of an open span's
record (``record``: the table that the C recorder's ``native/layout.h`` is generated from), and span names read from
a call's arguments (``labels``)."""
