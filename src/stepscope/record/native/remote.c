/* stepscope.record.native._native: a busy thread's stack read without the GIL (declared in remote.h; issue 41).

   A look that takes the GIL to read a busy thread's stack costs that thread more than the read: the recorder waits
   for the GIL (the thread releases it at its next C call, a torch op), and the thread, whose op ends while the
   recorder holds it, waits to be woken once it is dropped (~50-100 us a look on a 2-core VM, where the read is 2 us:
   benchmarks/thread_stall.py). So Walker.run (looks.c) reads such a thread's stack without the GIL, as echion and
   py-spy read another thread's or process's frames, and accounts the sample at its next hold of the GIL:

   - only while the thread does not hold the GIL (it is in a C call that released it, or waits for it): its
     interpreter frames do not change then. The GIL's state (CPython's internal _gil_runtime_state: `locked`,
     `last_holder`) is polled for up to spin_ns until the thread is not its holder;
   - every read goes through process_vm_readv on this process (pages copied into the walker's buffer, a system call
     a 4 KB page): a frame freed meanwhile (its data-stack chunk unmapped) fails the read instead of faulting;
   - only frames whose code the walker already holds (a strong reference, so the address is that code's) are read;
     any other ends the attempt, and a look with the GIL reads the thread (the code is then held);
   - after the walk the thread's innermost frame and its instruction are read again (one system call), and the
     GIL's holder: a thread that took the GIL and ran Python meanwhile has moved on (another instruction or frame),
     and what was read, torn perhaps, is dropped and read again once the thread releases the GIL (5 tries within
     the 200 us; then a look with the GIL reads it). A thread that ran and came back to the same innermost frame and
     instruction in those microseconds (a loop calling the same op) is read as it is then, its callers unchanged.

   The sample (its time, CPU clock and raw frames: code address and offset key) waits in the walker until the next
   hold of the GIL (at most 100 ms later: looks.c), where it is interned (intern_raw) and charged (walker_charge) in
   order, before that look's own. Nothing here touches a Python object or a table that another thread changes: the
   known codes are this module's own copy, brought up to date with the GIL held (remote_sync). */

#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_interp.h"
#else
#include "internal/pycore_runtime.h"
#endif
#include "internal/pycore_gil.h"

#include "remote.h"
#include "ownclock.h"

#ifdef STEPSCOPE_STACKWALK

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#if PY_VERSION_HEX >= 0x030D0000
#define INSTR_FIELD instr_ptr
#else
#define INSTR_FIELD prev_instr
#endif
#define POOL_FRAMES 8192 /* raw frames of the pending samples */
#define POOL_SAMPLES 256
#define MAX_RAW 512      /* frames of one stack (deeper: a look with the GIL reads it) */

struct Remote {
    void *gil;  /* the main interpreter's _gil_runtime_state (read with the GIL held at the first remote_sync) */
    Known *known; /* the walker's codes (strong references) up to n_known: read by other threads (ownclock.c) */
    Known *retired; /* the known sets grown out of, freed with the Remote (a signal handler may be reading one) */
    Py_ssize_t n_known;
    RawSample samples[POOL_SAMPLES];
    Py_ssize_t n_samples;
    int32_t n_frames;
    RawFrame frames[POOL_FRAMES];
    Wanted want[8]; /* codes the looks without the GIL met not held yet (remote_learn at the next hold of it) */
    int n_want;
    Reader rd;
};

/* ---- the known codes: a set of addresses that one thread adds to (with the GIL) while others read it ---------- */

struct Known {
    size_t mask, n;
    Known *next; /* (retired) */
    uintptr_t keys[];
};

static inline size_t known_hash(uintptr_t a) { return (size_t)mix2(a, 0); }

int known_has(const Known *k, uintptr_t a) {
    if (k == NULL || a == 0) return 0;
    for (size_t i = known_hash(a) & k->mask;; i = (i + 1) & k->mask) {
        uintptr_t v = __atomic_load_n(&k->keys[i], __ATOMIC_ACQUIRE);
        if (v == a) return 1;
        if (v == 0) return 0;
    }
}

static void known_put(Known *k, uintptr_t a) { /* (room is known to be left; a key not in k yet) */
    size_t i = known_hash(a) & k->mask;
    while (k->keys[i] != 0) i = (i + 1) & k->mask;
    __atomic_store_n(&k->keys[i], a, __ATOMIC_RELEASE);
    k->n++;
}

/* code address a added (the owner's thread, the GIL held); 0, or -1 with MemoryError set. A full set is copied
   into one twice its size, published at once; the old one stays readable until the Remote is freed. */
static int known_add(Remote *r, uintptr_t a) {
    Known *k = r->known;
    if (k == NULL || 2 * (k->n + 1) > k->mask + 1) {
        size_t size = k == NULL ? 1024 : 2 * (k->mask + 1);
        Known *g = PyMem_RawCalloc(1, sizeof(Known) + size * sizeof(uintptr_t));
        if (g == NULL) { PyErr_NoMemory(); return -1; }
        g->mask = size - 1;
        for (size_t i = 0; k != NULL && i <= k->mask; i++)
            if (k->keys[i] != 0) known_put(g, k->keys[i]);
        __atomic_store_n(&r->known, g, __ATOMIC_RELEASE);
        if (k != NULL) {
            k->next = r->retired;
            r->retired = k;
        }
        k = g;
    }
    if (!known_has(k, a)) known_put(k, a);
    return 0;
}

const Known *remote_known(Walker *w) {
    return w->remote == NULL ? NULL : __atomic_load_n(&w->remote->known, __ATOMIC_ACQUIRE);
}

/* the page at base (a copy), or NULL: it could not be read, or no room is left for another */
static const char *page_at(Reader *r, uintptr_t base) {
    for (int i = 0; i < r->n_pages; i++)
        if (r->base[i] == base) return r->pages[i];
    if (r->n_pages == RPAGES) return NULL;
#ifdef __linux__
    struct iovec local = {r->pages[r->n_pages], RPAGE}, remote = {(void *)base, RPAGE};
    ssize_t got = process_vm_readv(r->pid, &local, 1, &remote, 1, 0);
#else
    ssize_t got = -1; /* (no process_vm_readv: every look takes the GIL) */
    errno = ENOSYS;
#endif
    if (got != RPAGE) {
        if (got < 0 && errno != EFAULT) r->broken = 1;
        return NULL;
    }
    r->base[r->n_pages] = base;
    return r->pages[r->n_pages++];
}

/* len bytes at addr into out, through the page copies; 0, or -1 */
static int rread(Reader *r, uintptr_t addr, void *out, size_t len) {
    char *o = out;
    while (len > 0) {
        uintptr_t base = addr & ~(uintptr_t)(RPAGE - 1);
        size_t off = (size_t)(addr - base), k = RPAGE - off < len ? RPAGE - off : len;
        const char *p = page_at(r, base);
        if (p == NULL) return -1;
        memcpy(o, p + off, k);
        o += k;
        addr += k;
        len -= k;
    }
    return 0;
}

/* whether the thread whose state is ts holds the GIL now (locked, and its last holder) */
static int holds_gil(Remote *r, uintptr_t ts) {
    struct _gil_runtime_state *g = r->gil;
#if PY_VERSION_HEX >= 0x030D0000
    return __atomic_load_n(&g->locked, __ATOMIC_ACQUIRE) &&
           (uintptr_t)__atomic_load_n(&g->last_holder, __ATOMIC_ACQUIRE) == ts;
#else
    return __atomic_load_n(&g->locked._value, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&g->last_holder._value, __ATOMIC_ACQUIRE) == ts;
#endif
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* ts's innermost interpreter frame's address (0: none), where it was read from (3.11, 3.12: the thread's current
   _PyCFrame; 3.13: the thread state) and its instruction, read fresh (the page copies dropped); 0, or -1 */
static int top_of(Reader *r, uintptr_t ts, uintptr_t *at, uintptr_t *top, uintptr_t *instr) {
    r->n_pages = 0;
#if PY_VERSION_HEX >= 0x030D0000
    *at = ts + offsetof(PyThreadState, current_frame);
#else
    uintptr_t cf;
    if (rread(r, ts + offsetof(PyThreadState, cframe), &cf, sizeof cf) < 0 || cf == 0) return -1;
    *at = cf + offsetof(_PyCFrame, current_frame);
#endif
    if (rread(r, *at, top, sizeof *top) < 0) return -1;
    *instr = 0;
    if (*top != 0) {
        _PyInterpreterFrame loc;
        if (rread(r, *top, &loc, sizeof loc) < 0) return -1;
        *instr = (uintptr_t)INSTR(&loc);
    }
    return 0;
}

/* whether ts's innermost frame is still top, at instruction instr: the three words read again in one system call
   (the _PyCFrame's address in the thread state, the frame's in it, the instruction in the frame) */
static int still_at(Reader *r, uintptr_t ts, uintptr_t at, uintptr_t top, uintptr_t instr) {
    uintptr_t got[3] = {0, 0, 0};
    struct iovec local[3], remote[3];
    int n = 0;
#if PY_VERSION_HEX < 0x030D0000
    remote[n] = (struct iovec){(void *)(ts + offsetof(PyThreadState, cframe)), sizeof(uintptr_t)};
    local[n] = (struct iovec){&got[n], sizeof(uintptr_t)};
    n++;
#endif
    remote[n] = (struct iovec){(void *)at, sizeof(uintptr_t)};
    local[n] = (struct iovec){&got[n], sizeof(uintptr_t)};
    n++;
    if (top != 0) {
        remote[n] = (struct iovec){(void *)(top + offsetof(_PyInterpreterFrame, INSTR_FIELD)), sizeof(uintptr_t)};
        local[n] = (struct iovec){&got[n], sizeof(uintptr_t)};
        n++;
    }
#ifdef __linux__
    if (process_vm_readv(r->pid, local, (unsigned long)n, remote, (unsigned long)n, 0) != (ssize_t)(n * sizeof(uintptr_t)))
        return 0;
#else
    return 0;
#endif
    int k = 0;
#if PY_VERSION_HEX < 0x030D0000
    if (got[k++] + offsetof(_PyCFrame, current_frame) != at) return 0;
#else
    (void)ts;
#endif
    if (got[k++] != top) return 0;
    return top == 0 || got[k] == instr;
}

/* the frames from f outward into out (at most cap): their number, or -1 (a code not held, a failed read, deeper) */
static int32_t walk_raw(const Known *known, Reader *r, uintptr_t f, RawFrame *out, int32_t cap, const uintptr_t *lo,
                        const uintptr_t *hi, int nc, Wanted *want) {
    int32_t n = 0;
    want->code = 0;
    while (f != 0) {
        _PyInterpreterFrame loc;
        int in = 0; /* (a frame in one of the reading thread's own data-stack chunks: read in place, raw_stack) */
        for (int i = 0; i < nc && !in; i++) in = f >= lo[i] && f + sizeof loc <= hi[i];
        if (in) memcpy(&loc, (const void *)f, sizeof loc);
        else if (rread(r, f, &loc, sizeof loc) < 0) return -1;
        f = (uintptr_t)loc.previous;
        if (CSTACK(&loc)) continue;
        uintptr_t code = (uintptr_t)FRAME_CODE(&loc);
        if (n == cap || code == 0) return -1;
        if (!known_has(known, code)) { /* not held: read through the copies, only to skip it when a
                                                          frame object would not show it (a call in its prologue) */
            PyCodeObject co;
            if (rread(r, code, &co, sizeof co) < 0 || Py_TYPE(&co) != &PyCode_Type) return -1;
            uintptr_t first = code + offsetof(PyCodeObject, co_code_adaptive) +
                              (uintptr_t)co._co_firsttraceable * sizeof(_Py_CODEUNIT);
            if (loc.owner == FRAME_OWNED_BY_GENERATOR || (uintptr_t)INSTR(&loc) >= first) { /* (shown) */
                *want = (Wanted){code, (uintptr_t)loc.f_globals};
                return -1;
            }
            out[n++] = (RawFrame){code, 0};
            continue;
        }
        uint32_t key = 0;
        if (shown(&loc)) { /* (the code is held: its fields are read in place) */
            Py_ssize_t lasti = INSTR(&loc) - _PyCode_CODE((PyCodeObject *)code);
            if (lasti < -1 || lasti >= Py_SIZE((PyCodeObject *)code)) return -1; /* (a torn read) */
            key = offset_key(&loc);
        }
        out[n++] = (RawFrame){code, key};
    }
    return n;
}

int32_t raw_stack(Reader *rd, const Known *known, uintptr_t ts, RawFrame *out, int32_t cap, Wanted *want) {
    /* (the calling thread's own state, C stack and data-stack chunks are read in place: nothing else changes them
       while its signal handler runs, and a chunk is unlinked before it is freed; any other frame, a generator's or
       an entry frame on the C stack, through the page copies) */
    PyThreadState *t = (PyThreadState *)ts;
    uintptr_t lo[8], hi[8];
    int nc = 0;
    for (_PyStackChunk *c = t->datastack_chunk; c != NULL && nc < 8; c = c->previous) {
        lo[nc] = (uintptr_t)c;
        hi[nc++] = (uintptr_t)c + c->size;
    }
#if PY_VERSION_HEX >= 0x030D0000
    uintptr_t top = (uintptr_t)t->current_frame;
#else
    uintptr_t top = t->cframe != NULL ? (uintptr_t)t->cframe->current_frame : 0;
#endif
    rd->n_pages = 0;
    want->code = 0;
    return rd->broken ? -1 : walk_raw(known, rd, top, out, cap, lo, hi, nc, want);
}

int remote_sample(Walker *w, uintptr_t ts, unsigned long tid, int64_t cpu, int64_t spin_ns) {
    Remote *r = w->remote;
    if (r == NULL || r->rd.broken || ts == 0 || r->n_samples == POOL_SAMPLES || POOL_FRAMES - r->n_frames < MAX_RAW)
        return 0;
    int64_t t0 = clock_ns(CLOCK_MONOTONIC);
    for (int attempt = 0; attempt < 5; attempt++) { /* (a thread that ran Python meanwhile: again, within spin_ns) */
        for (int i = 0; holds_gil(r, ts); i++) {
            cpu_relax();
            if ((i & 63) == 63 && clock_ns(CLOCK_MONOTONIC) - t0 > spin_ns) return 0;
        }
        uintptr_t at, top, instr;
        if (top_of(&r->rd, ts, &at, &top, &instr) < 0) return 0;
        RawFrame *out = r->frames + r->n_frames;
        Wanted want;
        int32_t n = walk_raw(r->known, &r->rd, top, out, MAX_RAW, NULL, NULL, 0, &want);
        int moved = holds_gil(r, ts) || !still_at(&r->rd, ts, at, top, instr);
        if (n < 0 && !moved) { /* (a code not held yet, a failed read: the look with the GIL; the code then held) */
            if (want.code != 0 && r->n_want < 8) r->want[r->n_want++] = want;
            return 0;
        }
        if (moved) { /* (what it read may be torn: an unknown or no code among it too) */
            if (clock_ns(CLOCK_MONOTONIC) - t0 > spin_ns) return 0;
            continue;
        }
        r->samples[r->n_samples++] = (RawSample){clock_ns(CLOCK_MONOTONIC), cpu, tid, r->n_frames, n};
        r->n_frames += n;
        return 1;
    }
    return 0;
}

Py_ssize_t remote_pending(Walker *w) { return w->remote == NULL ? 0 : w->remote->n_samples; }

void remote_drop(Walker *w, Py_ssize_t mark) {
    Remote *r = w->remote;
    if (r == NULL || mark >= r->n_samples) return;
    r->n_samples = mark;
    r->n_frames = mark > 0 ? r->samples[mark - 1].start + r->samples[mark - 1].n : 0;
}

int remote_sync(Walker *w) {
    Remote *r = w->remote;
    if (r == NULL) {
        if ((r = w->remote = PyMem_RawCalloc(1, sizeof(Remote))) == NULL) { PyErr_NoMemory(); return -1; }
        r->rd.pid = getpid();
#if PY_VERSION_HEX >= 0x030C0000
        r->gil = PyThreadState_Get()->interp->ceval.gil;
#else
        r->gil = &_PyRuntime.ceval.gil;
#endif
    }
    r->rd.pid = getpid(); /* (a forked child reads its own memory: this pid, not its parent's) */
    for (; r->n_known < w->n_codes; r->n_known++)
        if (known_add(r, (uintptr_t)w->codes[r->n_known].code) < 0) return -1;
    return 0;
}

/* a live object of type tp at addr, as far as its header read through rd says (remote_learn) */
static int live_object(Reader *rd, uintptr_t addr, PyTypeObject *tp) {
    PyObject head;
    rd->n_pages = 0;
    if (addr == 0 || rread(rd, addr, &head, sizeof head) < 0) return 0;
    Py_ssize_t refs = head.ob_refcnt;
    return Py_TYPE(&head) == tp && refs >= 1 && (size_t)refs <= 0xFFFFFFFFu;
}

int remote_learn(Walker *w, const Wanted *want) {
    Remote *r = w->remote;
    if (r == NULL || r->rd.broken || !live_object(&r->rd, want->code, &PyCode_Type)) return 0;
    PyObject *globals = live_object(&r->rd, want->globals, &PyDict_Type) ? (PyObject *)want->globals : NULL;
    return code_learn(w, (PyObject *)want->code, globals) < 0 ? -1 : 0;
}

int remote_replay(Walker *w, int64_t period, int64_t cap) {
    Remote *r = w->remote;
    if (r == NULL) return 0;
    if (own_drain(w, period, cap) < 0) return -1; /* (the threads' own timers' samples: ownclock.c) */
    int rc = 0;
    for (int i = 0; i < r->n_want && rc == 0; i++) rc = remote_learn(w, &r->want[i]);
    r->n_want = 0;
    for (Py_ssize_t i = 0; i < r->n_samples && rc == 0; i++) {
        RawSample *s = &r->samples[i];
        int32_t si = intern_raw(w, r->frames + s->start, s->n);
        if (si == NOT_SHOWN) si = intern_stack(w, 0);
        rc = si < 0 ? -1 : walker_charge(w, s->tid, s->t, s->cpu, si, period, cap);
    }
    r->n_samples = 0;
    r->n_frames = 0;
    return rc < 0 ? -1 : remote_sync(w);
}

static Code *carried; /* (codes_carry) */
static Py_ssize_t n_carried;

void codes_carry(Code **codes, Py_ssize_t *n) {
    if (*n <= 0 || *n > 1 << 20) return;
    Code *older = carried;
    Py_ssize_t m = n_carried;
    carried = *codes, n_carried = *n;
    *codes = older, *n = m;
}

int codes_adopt(Walker *w, PyObject *hidden) {
    if (carried == NULL || w->n_codes != 0) return 0;
    w->codes = carried, w->n_codes = w->cap_codes = n_carried;
    carried = NULL, n_carried = 0;
    for (Py_ssize_t i = 0; i < w->n_codes; i++) { /* (each code held: its address is no other object's) */
        int h = PySet_Contains(hidden, ((PyCodeObject *)w->codes[i].code)->co_filename);
        w->codes[i].hidden = h > 0;
        if (h < 0 || map_put(&w->code_map, (uintptr_t)w->codes[i].code, 0, (int32_t)i) < 0) {
            PyErr_Clear();
            return -1;
        }
    }
    return 0;
}

void remote_clear(Walker *w) {
    if (w->remote == NULL) return;
    own_stop(w); /* (no signal handler reads its known sets any more) */
    for (Known *k = w->remote->retired, *next; k != NULL; k = next) {
        next = k->next;
        PyMem_RawFree(k);
    }
    PyMem_RawFree(w->remote->known);
    PyMem_RawFree(w->remote);
    w->remote = NULL;
}

#endif /* STEPSCOPE_STACKWALK */
