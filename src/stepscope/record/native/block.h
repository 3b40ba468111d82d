/* stepscope.record.native._native: take_block (block.c), the finished calls drained straight into a span block
   (core/spanformat.py's layout, SSB_* in layout.h: the records turned into columns), with no Python object per
   call: the recorder thread's flush holds the GIL for a fraction of what building a tuple per call and encoding
   them took. */

#ifndef STEPSCOPE_NATIVE_BLOCK_H
#define STEPSCOPE_NATIVE_BLOCK_H

#include "recorder.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* take_block(dumps, max_spans) -> (body, n, first span id) of the oldest finished calls (at most max_spans), taken
   out of the columns; None when there are none, or on a big-endian machine. dumps: the header's JSON writer. On an
   error (dumps raised, out of memory) nothing is taken: NULL with the exception set. */
PyObject *py_take_block(PyObject *m, PyObject *args);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
