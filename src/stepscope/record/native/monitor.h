/* stepscope.record.native._native: the sys.monitoring callbacks (PEP 669, Python 3.12+; monitor.c).

   They are registered themselves (tracing.monitoring), with the module's vectorcall signature. A code object's
   co_extra slot tells whose it is: 0 not traced (the event is disabled for it), 1 a Python probe (the event is handed
   to the Python callback registered with set_forward), 2 + index a native code (recorded here: a plain function's
   call pushed and popped, a generator's record made, parked and ended in C, a denoiser's nested calls; see
   recorder.h and gen.h). */

#ifndef STEPSCOPE_NATIVE_MONITOR_H
#define STEPSCOPE_NATIVE_MONITOR_H

#include "recorder.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

PyObject *mon_start(PyObject *m, PyObject *const *args, Py_ssize_t nargs);  /* PY_START(code, offset) */
PyObject *mon_resume(PyObject *m, PyObject *const *args, Py_ssize_t nargs); /* PY_RESUME(code, offset) */
PyObject *mon_return(PyObject *m, PyObject *const *args, Py_ssize_t nargs); /* PY_RETURN(code, offset, value) */
PyObject *mon_yield(PyObject *m, PyObject *const *args, Py_ssize_t nargs);  /* PY_YIELD(code, offset, value) */
PyObject *mon_throw(PyObject *m, PyObject *const *args, Py_ssize_t nargs);  /* PY_THROW(code, offset, exc) */
PyObject *mon_unwind(PyObject *m, PyObject *const *args, Py_ssize_t nargs); /* PY_UNWIND(code, offset, exc) */

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
