/* stepscope.record.native._native: each thread's accounting between the sampler's looks (threads.c; issue 41): the
   Walker methods that keep every thread's previous sample and the new sample rows in C. */

#ifndef STEPSCOPE_NATIVE_THREADS_H
#define STEPSCOPE_NATIVE_THREADS_H

#include "walker.h"

#ifdef STEPSCOPE_STACKWALK

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

PyObject *walker_sample(Walker *w, PyObject *args);
PyObject *walker_blocked(Walker *w, PyObject *skip);
PyObject *walker_unmoved(Walker *w, PyObject *skip);
PyObject *walker_idle(Walker *w, PyObject *args);
int walker_idle_spend(Walker *w, int64_t t, int64_t used);
PyObject *walker_hand_over(Walker *w, PyObject *args);
PyObject *walker_forget(Walker *w, PyObject *args);
PyObject *walker_rows(Walker *w, PyObject *unused);

/* the thread table and the rows released (Walker.reset, dealloc) */
void threads_clear(Walker *w);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* STEPSCOPE_STACKWALK */
#endif
