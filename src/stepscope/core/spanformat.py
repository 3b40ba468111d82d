"""The span block format, ``SSB1``: what the bytes of one block of spans are. This module owns it; everything else
that writes or reads a block takes its constants from here:

- ``store.spanblock``: the Python writer and reader (``encode``, ``columns``, ``spans_of``);
- the C recorder's ``take_block`` (src/stepscope/record/native/block.c): its constants are ``SSB_*`` in
  ``native/layout.h``, generated from this module by ``scripts/native_layout.py`` (tests/test_native_module.py
  checks the header is current and that the built extension agrees);
- ``store.reader`` (numpy views of the columns) and ``core.spantable`` (``NO_PARENT`` in span tables).

Layout (little-endian), one ``body`` BLOB of ``span_blocks``::

    MAGIC | u32 n | u32 header bytes (h) | header: JSON, padded with spaces to a multiple of HEADER_ALIGN bytes
    | span_id int64[n] | parent_id int64[n] (NO_PARENT: none) | start_ns int64[n] | end_ns int64[n]
    | thread_id int64[n] (0: unknown) | name int32[n] | op int32[n] | error int32[n] (NO_ERROR: ok)

that is ``HEAD`` (``HEAD_BYTES``), the header, then the ``INT_COLUMNS`` (int64 each) and the ``CODE_COLUMNS``
(int32 each), in that order, each ``n`` long. The header is ``{"names": [...], "ops": [...], "errors": [...],
"attrs": [[row, attrs], ...]}``: the codes of the int32 columns index those lists; ``attrs`` lists only the rows that
have attributes (JSON objects). Times are ``perf_counter_ns`` readings of the run's clock (ns). ``VERSION`` is the
digit of ``MAGIC``: a reader refuses a block of another. Stdlib only (the recording process writes blocks).
"""

from __future__ import annotations

import struct

#: the format's version, the last byte of ``MAGIC``
VERSION = 1
#: a block's first 4 bytes
MAGIC = b"SSB%d" % VERSION
#: ``struct`` format of the fixed head: MAGIC, n (spans), h (header bytes, padded)
HEAD = "<4sII"
#: its size in bytes
HEAD_BYTES = struct.calcsize(HEAD)
#: the JSON header is padded with spaces to a multiple of this (the columns stay 8-byte aligned)
HEADER_ALIGN = 8
#: parent_id of a span without a parent (the int64 minimum: span ids are any other SQLite integer)
NO_PARENT = -(2 ** 63)
#: the error code of a span that ended without an exception
NO_ERROR = -1
#: the int64 columns, in their order in a block
INT_COLUMNS = ("id", "parent", "start", "end", "thread")
#: the int32 columns (codes into the header's ``names``, ``ops``, ``errors``), after the int64 ones
CODE_COLUMNS = ("name", "op", "error")


def body_bytes(n: int, header_bytes: int) -> int:
    """The size in bytes of a block of ``n`` spans whose padded JSON header is ``header_bytes`` long."""
    return HEAD_BYTES + header_bytes + n * (8 * len(INT_COLUMNS) + 4 * len(CODE_COLUMNS))
