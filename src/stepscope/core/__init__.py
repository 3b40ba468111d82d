"""Shared types and small helpers that every layer uses: the span model (``model``), span tables (``spantable``),
clocks, units, limits, JSON depth checks, job ids, process facts, the step rules table (``steprules``) and the span
block format (``spanformat``, its one owner).

``model``, ``clock``, ``units``, ``limits``, ``jsondepth``, ``procs``, ``steprules`` and ``spanformat`` are stdlib only:
the recorder (``stepscope.record``) imports them inside the profiled program. ``spantable`` and ``jobids`` use numpy
(analysis only).
"""
