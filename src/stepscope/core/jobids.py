"""How a job's processes share one run's id spaces (``store.jobjoin`` joins them; analyses tell them apart): process
``k`` (1, 2... in start order; 0 is the top program) has its span ids moved up by ``k << SPAN_SHIFT`` and its Python
thread ids replaced by ``THREAD_BASE + (k << 16) + j`` (``j``: its threads in order): above every thread id of the top
process (CPython's thread ids are addresses below 2**47) and below 2**53 (exact in JavaScript)."""

from __future__ import annotations

import numpy as np

#: span ids of process k are moved up by k << SPAN_SHIFT (2**40 spans a process; 8,191 processes below 2**53)
SPAN_SHIFT = 40
#: thread ids of process k are THREAD_BASE + (k << 16) + j: above CPython's thread ids (addresses < 2**47)
THREAD_BASE = 1 << 47
#: between a process's label and its thread's own name in the joined thread names ("rank 1 (pid 42) · MainThread")
LABEL_SEP = " · "


def process_index(thread) -> np.ndarray:
    """Per thread id of a joined run (array-like of int64): its process (0: the top program, k: the k-th process)."""
    thread = np.asarray(thread, np.int64)
    return np.where(thread >= THREAD_BASE, ((thread - THREAD_BASE) >> 16), 0)
