/* stepscope.record.native._native: a busy thread's stack read without the GIL (remote.c; issue 41). Included by
   looks.c (Walker.run's looks), stackwalk.c and threads.c (the replay under the GIL). Needs the walker (walker.h). */

#ifndef STEPSCOPE_NATIVE_REMOTE_H
#define STEPSCOPE_NATIVE_REMOTE_H

#include "walker.h"

#ifdef STEPSCOPE_STACKWALK

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* a frame read without the GIL: its code's address (a code the walker holds) and its offs key (stackwalk.c's
   offset_key), 0 for a frame a frame object would not show */
typedef struct {
    uintptr_t code;
    uint32_t key;
} RawFrame;

/* a look's sample of one thread, made without the GIL, accounted at the next hold of it (remote_replay) */
typedef struct {
    int64_t t, cpu;
    unsigned long tid;
    int32_t start, n; /* its frames in the pending pool, leaf first */
} RawSample;

/* The pending samples and the reader's page copies (the walker's; PyMem_Raw, made at the first remote look). */
typedef struct Remote Remote; /* (walker.h: struct Remote *remote) */

/* Read thread state ts's stack without the GIL, once its thread does not hold the GIL (waited for up to spin_ns):
   the sample (t, cpu, tid) appended to the walker's pending samples. 1: done; 0: not possible now (the thread held
   the GIL all that time, ran Python meanwhile, a code the walker does not hold yet, a read that failed, no room):
   a look with the GIL reads it. Touches no Python object and no table that another thread changes. */
int remote_sample(Walker *w, uintptr_t ts, unsigned long tid, int64_t cpu, int64_t spin_ns);
/* the number of pending samples (a mark: remote_drop(w, mark) drops those made after it) */
Py_ssize_t remote_pending(Walker *w);
void remote_drop(Walker *w, Py_ssize_t mark);
/* With the GIL: the pending samples accounted in order (intern_raw, walker_charge), the walker's known codes
   brought up to date (remote_sample reads only codes it holds); 0, or -1 with an exception set. */
int remote_replay(Walker *w, int64_t period, int64_t cap);
/* With the GIL: the known codes brought up to date with the walker's table; 0, or -1 with MemoryError set */
int remote_sync(Walker *w);
/* the remote state freed (the walker's tables cleared: its codes released) */
void remote_clear(Walker *w);

/* stackwalk.c: the stack index of raw frames fr[0:n] (leaf first), as walk_one gives a thread's (NOT_SHOWN, NO_MEMORY) */
int32_t intern_raw(Walker *w, const RawFrame *fr, int32_t n);
/* threads.c: thread tid's sample at t on stack si with its CPU clock at cpu, charged as sample() charges a thread
   that moved; a thread the walker no longer knows is left out. 0, or -1 with MemoryError set. */
int walker_charge(Walker *w, unsigned long tid, int64_t t, int64_t cpu, int32_t si, int64_t period, int64_t cap);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
#endif
