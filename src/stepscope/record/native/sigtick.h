/* stepscope.record.native._native: the main thread's timer-signal sampler in C (sigtick.c; issue 41): the Tick type
   (its schedule and rest state, sampling.signals.MainThreadSampler's) and tick(), the handler installed for both timer
   signals. Needs the walker (stackwalk.h): elsewhere sigtick_init adds nothing. */

#ifndef STEPSCOPE_NATIVE_SIGTICK_H
#define STEPSCOPE_NATIVE_SIGTICK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "stackwalk.h"
#include "looks.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#ifdef STEPSCOPE_STACKWALK
extern PyTypeObject TickType;
#endif
/* adds Tick, tick and set_tick to the module m (where the walker is built); 0, or -1 with an exception set */
int sigtick_init(PyObject *m);
/* 1 when a profiler or tracer other than stepscope's sees this thread's calls, 0 if none, -1 with an exception set
   (module.c) */
int foreign_tool(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
