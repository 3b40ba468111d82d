/* stepscope.record.native._native: a busy thread sampled by a timer of its own (ownclock.c; issue 41).
   Included by looks.c (Walker.run's decisions), threads.c (the samples accounted), remote.c and stackwalk.c (the
   walker's end). Needs the walker (walker.h). */

#ifndef STEPSCOPE_NATIVE_OWNCLOCK_H
#define STEPSCOPE_NATIVE_OWNCLOCK_H

#include "walker.h"

#ifdef STEPSCOPE_STACKWALK

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* A look at t decides for each thread other than the main one whose CPU clock it read (cpu, ns): 1 when the
   thread's own timer samples it (it ran at least OWN_BUSY of the time since the previous decision, and its
   handler read every stack since; the look leaves it out), else 0 (the look reads it). Arms the thread's timer
   once it ran that much at OWN_STREAK decisions in a row; turns its sampling off at a decision where it did not.
   ran: the caller saw it run that much since its own last look (a thread is watched from such a look on: the
   slots are few, and idle threads never take one). Its timer's period: w->own_period (the overhead budget's), at
   least the looks' period. No GIL needed; the owner walker's recorder thread only. */
int own_decide(Walker *w, unsigned long tid, unsigned long native, uintptr_t ts, int64_t t, int64_t cpu,
               int64_t period, int ran);
/* With the GIL: the samples the threads' handlers took, accounted in order (intern_raw, walker_charge), and the
   slots of threads that ended freed (their timers deleted). 0, or -1 with an exception set. */
int own_drain(Walker *w, int64_t period, int64_t cap);
/* Every thread's own timer deleted and its sampling off (a handler running meanwhile waited for), if w owns them. */
void own_stop(Walker *w);
/* Whether native is a thread the current look leaves to its own timer (w->own_skip) */
int own_skipped(const Walker *w, unsigned long native);

/* Walker.own_stop(), _native.own_signal(signum) */
PyObject *walker_own_stop(PyObject *walker, PyObject *unused);
PyObject *own_signal(PyObject *module, PyObject *arg);

#define OWN_SLOW 4 /* while every thread that runs is sampled by its own timer, the looks come this many periods apart */

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
#endif
