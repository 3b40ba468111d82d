"""The open-span record: the fields of the list that ``buffer.current_span`` holds for each open span.

An open span is one list of ``REC_LEN`` items, made current in the ``buffer.current_span`` ContextVar when the span
opens (so that spans nest per thread and per asyncio task) and turned into a finished span tuple
(``buffer.SPAN_FIELDS``) when it ends. Its fields, by index:

- ``REC_ID``: the span id (int); None in the marker of a call that a subclass filter leaves untraced
  (``tracing.probes``: it only pairs the call's end with its start);
- ``REC_START``: the start, ``perf_counter_ns`` (ns; 0 in a marker and in a C function wrapper's record);
- ``REC_PARENT``: the parent span's id, or None at the top level;
- ``REC_PROBE``: the ``tracing.probes.Probe`` that opened it; None for spans opened by ``stepscope.span`` and the
  wrappers, ``steps.hooks``' iteration marker for a step loop's iteration;
- ``REC_ATTRS``: the span's attributes, a dict, or None;
- ``REC_NAME``: the span name (None in a marker);
- ``REC_ERROR``: the qualified name of the exception the call is ending by, or None;
- ``REC_RESTORE``: the ContextVar's value to put back when the span ends or its generator suspends (the record
  around it, or None).

A record is built as a list literal in this order, ``[id, start, parent, probe, attrs, name, error, restore]``
(``FIELDS``), and read with these constants: plain module ints, one global read each (no attribute lookup). The two
hottest reads, a Python-recorded call's end (``tracing.monitoring``'s inlined return, ``Probe.exit``), unpack the
whole record at once in ``FIELDS`` order instead (``sid, start, parent, probe, attrs, name, error, restore = rec``:
one specialised instruction, cheaper than eight subscripts); tests/test_native_module.py checks that every such
unpacking in ``stepscope.record`` follows ``FIELDS``. The C recorder (``stepscope.record.native``) reads and makes
the same lists: its indices come from ``native/layout.h``, generated from this module by
``scripts/native_layout.py``; tests/test_native_module.py checks the header is current and that the built
extension's constants equal these. Stdlib only (nothing at all imported).
"""

REC_ID = 0
REC_START = 1
REC_PARENT = 2
REC_PROBE = 3
REC_ATTRS = 4
REC_NAME = 5
REC_ERROR = 6
REC_RESTORE = 7
#: the number of fields (a list of another length is not a record)
REC_LEN = 8

#: the field names in index order (``REC_<NAME>`` is the index of ``<name>``)
FIELDS = ("id", "start", "parent", "probe", "attrs", "name", "error", "restore")

assert [globals()[f"REC_{f.upper()}"] for f in FIELDS] == list(range(REC_LEN))


def finished(rec: list, op: str, end_ns: int, thread_id: int) -> tuple:
    """The finished span tuple (``buffer.SPAN_FIELDS``: span_id, parent_id, name, op, start_ns, end_ns, thread_id,
    error_type, attrs) of the open-span record ``rec``, ending at ``end_ns`` (``perf_counter_ns``) on thread
    ``thread_id`` (``threading.get_ident``) with op ``op``. Raises IndexError or TypeError for what is not a record."""
    return (rec[REC_ID], rec[REC_PARENT], rec[REC_NAME], op, rec[REC_START], end_ns, thread_id, rec[REC_ERROR],
            rec[REC_ATTRS])
