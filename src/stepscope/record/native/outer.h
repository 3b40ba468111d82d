/* stepscope.record.native._native: the outermost call of a denoiser's forward in C (outer.c; issue 42), where its
   Python probe made the same record (tracing.probes.Probe with steps.hooks.StepScoped, and memory.history.SpanMemory's
   readings), ~95 us a denoising step on a cache cooled by the step. */

#ifndef STEPSCOPE_NATIVE_OUTER_H
#define STEPSCOPE_NATIVE_OUTER_H

#include "recorder.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* The outermost call of denoiser code index idx starts: its record made current here (1), or nothing done (0: the
   Python probe's enter is due: a case only it handles), or -1 with an exception set. */
int outer_enter(int32_t idx);

/* It ends: its record finished here (1), or nothing done (0: the Python probe's exit is due), or -1. */
int outer_exit(int32_t idx);

/* The RSS (bytes: statm's resident pages x page), the RSS high-water mark (bytes: getrusage's ru_maxrss) and the
   calling thread's run-queue wait (ns: schedstat's second field), -1 each where unread (statm < 0: neither of the
   first two; sched < 0: no wait). Two system calls (getrusage, statm), a third (schedstat) when the thread left its CPU
   since its last read of it (run_delay_read), the GIL kept; at a span's entry (entry 1) none when the
   calling thread's last exit readings (entry 0) of the same files were taken under 2 ms before: those, once (the
   gap between two step-level spans, a denoiser's call and the scheduler's step, counted in the second). */
void readings_now(int statm, long long page, int sched, int entry, long long *rss, long long *hwm, long long *wait);

/* The calling thread's run-queue wait (ns: schedstat's second field, sched its open file), -1 where unread: read
   again only when the thread left its CPU since its last read (getrusage's context switches: readings_now). */
long long run_delay_read(int sched);

/* The calling thread's OS id (gettid), asked of the kernel once per thread and again in a forked child. */
unsigned long thread_tid(void);

/* outer_setup(probes_globals, scope_var, finished, noted, max_noted, start_listeners, prefixes, page): what
   the outermost calls read (see outer.c); None turns the C path off. */
PyObject *py_outer_setup(PyObject *m, PyObject *args);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
