/* stepscope.record.native._native: the ContextVar's records (the parent of a span opened now), and generators,
   coroutines and async generators on 3.12+ (gen.c).

   Their records are the Python recorder's own (tracing.probes: a list made current in the ContextVar, so that nesting
   follows each asyncio task's context); at PY_YIELD the record is parked by frame address and the caller's value
   put back, at PY_RESUME/PY_THROW it is current again, at PY_RETURN/PY_UNWIND it ends as one record in the columns.
   The same steps as tracing.probes.Probe, without a Python frame per event. */

#ifndef STEPSCOPE_NATIVE_GEN_H
#define STEPSCOPE_NATIVE_GEN_H

#include "recorder.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* The parent id of a span opened now, given the ContextVar's value prev (0: none; a record whose id is None is the
   marker of a call a subclass filter left untraced): the larger of its id and this thread's innermost native one. */
int64_t parent_now(PyObject *prev);

/* A generator call of code index idx starts: its record made and made current (Probe.enter). */
void gen_start(int32_t idx);

/* It yields: its record parked under its frame's address, the caller's put back (Probe.suspend). */
void gen_yield(int32_t idx);

/* It resumes (or is thrown into): its parked record is current again (Probe.resume). */
void gen_resume(void);

/* It ends (exc_type: the exception it ends by, borrowed, or NULL): one finished record (Probe.error, Probe.exit). */
void gen_end(int32_t idx, PyObject *exc_type);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

/* a span id as Python: an int, or None for 0 (no span) */
static inline PyObject *opt_id(int64_t v) { return v ? PyLong_FromLongLong(v) : Py_NewRef(Py_None); }

/* the ContextVar's record, a new reference (None when unset) */
static inline PyObject *cv_get(void) {
    PyObject *v = NULL;
    if (PyContextVar_Get(current_span, Py_None, &v) < 0) { PyErr_Clear(); return Py_NewRef(Py_None); }
    return v;
}

/* the ContextVar set to v (an error cleared) */
static inline void cv_set(PyObject *v) {
    PyObject *tok = PyContextVar_Set(current_span, v);
    if (tok == NULL) PyErr_Clear(); else Py_DECREF(tok);
}

#endif
