/* stepscope.record.native._native: the recorder thread's steady state in C (looks.c; issue 41): Walker.run, the
   looks until something else is due, each with the GIL taken for the look alone. Needs the walker (stackwalk.h). */

#ifndef STEPSCOPE_NATIVE_LOOKS_H
#define STEPSCOPE_NATIVE_LOOKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "stackwalk.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#ifdef STEPSCOPE_STACKWALK
/* Walker.run (args: see looks.c); the walker is a Walker (walker.h) */
PyObject *walker_run(PyObject *walker, PyObject *args);
/* Walker.lane (args: see looks.c): the memory lane's RSS rows read without the GIL, sampling off */
PyObject *walker_lane(PyObject *walker, PyObject *args);
/* Walker.notify(): wake a run() that waits (the session's finish, a fork: with its lock's release) */
PyObject *walker_notify(PyObject *walker, PyObject *unused);
/* looks.c's names, made at the module's init: 0, or -1 with an exception set */
int looks_init(void);
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
