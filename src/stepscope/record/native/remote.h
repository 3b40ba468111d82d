/* stepscope.record.native._native: a busy thread's stack read without the GIL (remote.c; issue 41). Included by
   looks.c (Walker.run's looks), stackwalk.c and threads.c (the replay under the GIL). Needs the walker (walker.h). */

#ifndef STEPSCOPE_NATIVE_REMOTE_H
#define STEPSCOPE_NATIVE_REMOTE_H

#include "walker.h"

#include <sys/types.h>

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

/* a code a read without the GIL met but the walker does not hold yet, and its frame's globals (the module's name):
   learned at the next hold of the GIL (remote_learn), so that the next read of that stack needs no GIL */
typedef struct {
    uintptr_t code, globals;
} Wanted;

/* a look's sample of one thread, made without the GIL, accounted at the next hold of it (remote_replay) */
typedef struct {
    int64_t t, cpu;
    unsigned long tid;
    int32_t start, n; /* its frames in the pending pool, leaf first */
} RawSample;

/* The pending samples, the known codes and the reader's page copies (the walker's; PyMem_Raw, made at the first
   remote look). */
typedef struct Remote Remote; /* (walker.h: struct Remote *remote) */

/* Reads of this process's memory through process_vm_readv, a 4 KB page at a time, each page copied once a walk: a
   read of memory freed and unmapped meanwhile fails instead of faulting. One reader per thread that reads. */
#define RPAGE 4096
#define RPAGES 16 /* pages one walk may copy (64 KB: a 30-frame stack takes 3-5) */
typedef struct {
    pid_t pid;
    int broken; /* process_vm_readv failed on this process (seccomp, no CONFIG_CROSS_MEMORY_ATTACH): never again */
    int n_pages;
    uintptr_t base[RPAGES];
    char pages[RPAGES][RPAGE];
} Reader;

/* The walker's known codes (code addresses it holds a strong reference to): added to by the thread that owns the
   walker, with the GIL, and read by any thread without it (a look without the GIL, a thread's own timer's signal
   handler: ownclock.c). */
typedef struct Known Known;
int known_has(const Known *k, uintptr_t a);
/* the walker's known set now (NULL: none yet); valid until remote_clear */
const Known *remote_known(Walker *w);
/* The stack of the calling thread, whose state is ts (3.11, 3.12: its current _PyCFrame's frame; 3.13: its current
   frame), into out (leaf first, at most cap frames), only frames of codes in known (or frames a frame object would
   not show): their number, or -1 (a code not known, a failed read, deeper than cap; a code not known that the
   frame shows also into *want, its code 0 otherwise). Its state and its data-stack chunks' frames are read in
   place, any other frame through rd. Async-signal-safe (a signal handler in that thread: ownclock.c): system
   calls, and reads of its own memory, rd, known and the known codes only. */
int32_t raw_stack(Reader *rd, const Known *known, uintptr_t ts, RawFrame *out, int32_t cap, Wanted *want);
/* With the GIL: a code a read without the GIL wanted, held from now on (codes made known at the next remote_sync)
   when it is still a live code object: its header read through the page copies (memory freed and unmapped
   meanwhile fails the read), its type the code type and its reference count 1 to 2**32 (a freed object's is 0, or
   the allocator's free-list pointer); its module from the globals when those pass the same test as a dict. 0 (also
   when it is left out), or -1 with MemoryError set. */
int remote_learn(Walker *w, const Wanted *want);

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
/* With the GIL: the codes of a walker being freed (codes[0:n], their references) kept for the process's next walker
   (a session after a session: its busy threads' codes known from its first look, not learned again from misses);
   what it does not keep (older ones carried, or over 2**20) is left in codes[0:*n] for the caller to release */
void codes_carry(Code **codes, Py_ssize_t *n);
/* With the GIL: a new walker's table (empty) given the codes carried, hidden by its own files; 0, or -1 on no memory
   (the table half made: the caller clears it) */
int codes_adopt(Walker *w, PyObject *hidden);

/* stackwalk.c: the code index of a live code object (its module's name from globals, a dict or NULL), its entry made
   as at its first frame; -1 with MemoryError set */
int32_t code_learn(Walker *w, PyObject *code, PyObject *globals);
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
