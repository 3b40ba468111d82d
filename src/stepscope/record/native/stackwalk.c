/* stepscope.record.native._native: the sampler's stack walk (declared in stackwalk.h; issue 41).

   sys._current_frames() makes a frame object for each thread's innermost frame, and walking f_back makes one for
   every frame above it; the Python sampler then looks each (code, instruction) up in a dict: ~35 us a thread at a
   depth of 30. Here the same chain is read in place. CPython keeps a thread's running frames as _PyInterpreterFrame
   structs linked by `previous` (internal/pycore_frame.h, hence Py_BUILD_CORE in this file only):

     3.11, 3.12  tstate->cframe->current_frame, frame->f_code, frame->prev_instr (the instruction being executed)
     3.13        tstate->current_frame, frame->f_executable, frame->instr_ptr

   Frames that a frame object would not show are skipped, as PyFrame_GetBack and sys._current_frames skip them:
   incomplete ones (a call still in its prologue: _PyFrame_IsIncomplete) and, on 3.12+, the C stack's entry frames
   (owner FRAME_OWNED_BY_CSTACK). The instruction offset is CPython's f_lasti (_PyInterpreterFrame_LASTI: the
   instruction pointer less the start of the code's bytecode, in code units; the frame object's f_lasti is it in
   bytes) and a frame's line is PyCode_Addr2Line at that byte offset, which is what f_lineno computes (a frame with a
   trace function's own f_lineno aside).

   The cost is memory reads: a frame a busy thread wrote is in another core's cache. The hot path reads each frame's
   own fields (owner, code address, instruction pointer, previous) and one 16-byte slot of the offs table, and never
   the code object: the offset is computed from addresses (the bytecode is inline in the code object), and whether
   the frame is complete is known from the slot (only a complete frame's (code, offset, generator or not) is entered:
   _PyFrame_IsIncomplete depends on nothing else), so the code object is read only at a first sight.

   Everything runs with the GIL held and runs no Python code (dict and set lookups with str keys, no object freed),
   so no other thread changes a frame chain or the thread list meanwhile: a thread that released the GIL is parked
   at a call, its frames as they were; thread states are unlinked only with the GIL held (CPython's
   _PyThreadState_DeleteCurrent), and one linked meanwhile by a new C thread has no frame yet. The current
   interpreter's threads only (sys._current_frames reads every interpreter's; stepscope runs in the main one).

   The tables, all open addressing with linear probing and a power-of-two size kept at most half full:

     codes  code address -> code index (Code: the code object, a strong reference; its module's __name__, read once
            from the globals of the first frame seen running it; hidden: its file is one of HIDDEN_FILES)
     offs   (code address, f_lasti, a generator's frame or not) -> frame index, or -1 for a hidden code's frame: the
            one lookup a frame costs
     lines  (code index, line) -> frame index: instructions on the same line are one frame, as in the Python sampler
     stacks a stack's frame indices (leaf first, hidden frames left out, at most max_depth of those nearest the leaf)
            -> stack index; the sequences are kept end to end in one array

   Frame and stack indices are dense and never reused; take() hands those made since the previous take to Python. */

#include "threads.h"
#include "looks.h"
#include "remote.h"
#include "ownclock.h"

#include <unistd.h>

#ifdef STEPSCOPE_STACKWALK


/* The code index of code, first seen with globals (its frame's): its entry made (the code kept; hidden by its file;
   its module from the globals, a borrowed dict lookup that runs no Python code: a str key). -1 with MemoryError. */
int32_t code_learn(Walker *w, PyObject *code, PyObject *globals) {
    int32_t ci = map_get(&w->code_map, (uintptr_t)code, 0);
    if (ci != MISSING) return ci;
    if (reserve((void **)&w->codes, w->n_codes, &w->cap_codes, sizeof(Code), 1) < 0) return -1;
    ci = (int32_t)w->n_codes;
    if (map_put(&w->code_map, (uintptr_t)code, 0, ci) < 0) return -1;
    int hidden = PySet_Contains(w->hidden, ((PyCodeObject *)code)->co_filename);
    if (hidden < 0) { PyErr_Clear(); hidden = 0; }
    PyObject *module = NULL;
    if (!hidden && globals != NULL && PyDict_Check(globals)) {
        module = PyDict_GetItemWithError(globals, w->name); /* borrowed */
        if (module == NULL) PyErr_Clear();
        else if (!PyUnicode_Check(module)) module = NULL;
    }
    w->codes[ci] = (Code){Py_NewRef(code), Py_XNewRef(module), hidden};
    w->n_codes++;
    return ci;
}

/* The code index of code, first seen in frame f (code_learn); MISSING for a code not held when f is NULL. */
static int32_t code_index(Walker *w, PyObject *code, _PyInterpreterFrame *f) {
    if (f == NULL) return map_get(&w->code_map, (uintptr_t)code, 0); /* (a raw frame's code, always held: remote.c) */
    return code_learn(w, code, f->f_globals);
}

/* The frame index of f at offset key `key` (offset_key), not in offs: NOT_SHOWN (an incomplete frame: not
   entered), -1 for a hidden code's frame, NO_MEMORY. */
static int32_t new_frame_of(Walker *w, PyObject *code, _PyInterpreterFrame *f, uint32_t key) {
    int lasti = (int)(key >> 1) - 1;
    int32_t ci = code_index(w, code, f);
    if (ci == MISSING) return NOT_SHOWN;
    if (ci < 0) return NO_MEMORY;
    int32_t fi = -1;
    if (!w->codes[ci].hidden) {
        /* f_lineno: the line of the byte offset f_lasti (-1: none; it is read once per (code, instruction)) */
        int line = PyCode_Addr2Line((PyCodeObject *)code, lasti * (int)sizeof(_Py_CODEUNIT));
        if (line < 0) line = -1;
        fi = map_get(&w->lines, (uintptr_t)ci + 1, (uint32_t)line);
        if (fi == MISSING) {
            if (reserve((void **)&w->frames, w->n_frames, &w->cap_frames, sizeof(WFrame), 1) < 0) return NO_MEMORY;
            fi = (int32_t)w->n_frames;
            if (map_put(&w->lines, (uintptr_t)ci + 1, (uint32_t)line, fi) < 0) return NO_MEMORY;
            w->frames[w->n_frames++] = (WFrame){ci, line};
            w->unseen++;
        }
    }
    if (map_put(&w->offs, (uintptr_t)code, key, fi) < 0) return NO_MEMORY;
    return fi;
}

static int32_t new_frame(Walker *w, _PyInterpreterFrame *f, uint32_t key) {
    return shown(f) ? new_frame_of(w, FRAME_CODE(f), f, key) : NOT_SHOWN;
}

/* The frame index of f (not the C stack's): a lookup in offs when seen before, else new_frame. */
static inline int32_t frame_index(Walker *w, _PyInterpreterFrame *f) {
    uint32_t key = offset_key(f);
    int32_t fi = map_get(&w->offs, (uintptr_t)FRAME_CODE(f), key);
    return fi != MISSING ? fi : new_frame(w, f, key);
}

static uint64_t hash_ids(const int32_t *ids, int32_t n) {
    uint64_t h = (uint64_t)n;
    for (int32_t i = 0; i < n; i++) h = mix2(h, (uint64_t)(uint32_t)ids[i]);
    return h;
}

/* The stack index of buf[0:n] (frame indices, leaf first), made if new: a hash lookup when seen before. */
int32_t intern_stack(Walker *w, int32_t n) {
    uint64_t h = hash_ids(w->buf, n);
    if (w->stack_mask) {
        for (size_t i = h & w->stack_mask; w->stack_slots[i] >= 0; i = (i + 1) & w->stack_mask) {
            Stack *s = &w->stacks[w->stack_slots[i]];
            if (s->hash == h && s->len == n && memcmp(w->ids + s->start, w->buf, (size_t)n * sizeof(int32_t)) == 0)
                return w->stack_slots[i];
        }
    }
    if (reserve((void **)&w->stacks, w->n_stacks, &w->cap_stacks, sizeof(Stack), 1) < 0) return NO_MEMORY;
    if (reserve((void **)&w->ids, w->n_ids, &w->cap_ids, sizeof(int32_t), n) < 0) return NO_MEMORY;
    if (2 * ((size_t)w->n_stacks + 1) > w->stack_mask + 1) { /* grow the slots (at most half full) */
        size_t size = w->stack_mask ? 2 * (w->stack_mask + 1) : 256;
        int32_t *slots = PyMem_Malloc(size * sizeof(int32_t));
        if (slots == NULL) { PyErr_NoMemory(); return NO_MEMORY; }
        memset(slots, 0xff, size * sizeof(int32_t));
        for (Py_ssize_t k = 0; k < w->n_stacks; k++) {
            size_t i = w->stacks[k].hash & (size - 1);
            while (slots[i] >= 0) i = (i + 1) & (size - 1);
            slots[i] = (int32_t)k;
        }
        PyMem_Free(w->stack_slots);
        w->stack_slots = slots;
        w->stack_mask = size - 1;
    }
    int32_t si = (int32_t)w->n_stacks++;
    w->stacks[si] = (Stack){w->n_ids, n, h};
    memcpy(w->ids + w->n_ids, w->buf, (size_t)n * sizeof(int32_t));
    w->n_ids += n;
    size_t i = h & w->stack_mask;
    while (w->stack_slots[i] >= 0) i = (i + 1) & w->stack_mask;
    w->stack_slots[i] = si;
    w->unseen++;
    return si;
}

/* One thread's stack from its innermost frame f: its stack index; NOT_SHOWN when it has no frame a frame object
   would show (not in sys._current_frames), NO_MEMORY. As the Python sampler's _record: hidden frames left out, the
   max_depth shown frames nearest the leaf kept, a walk that stops with a shown frame left above counted in
   truncated. */
int32_t walk_one(Walker *w, _PyInterpreterFrame *f) {
    int32_t depth = 0;
    int any = 0;
    while (f != NULL && depth < w->max_depth) {
        if (!CSTACK(f)) {
            int32_t fi = frame_index(w, f);
            if (fi == NO_MEMORY) return NO_MEMORY;
            if (fi >= 0) w->buf[depth++] = fi;
            any |= fi != NOT_SHOWN;
        }
        f = f->previous;
    }
    while (f != NULL && !shown(f)) f = f->previous;
    if (f != NULL) w->truncated++;
    return any || f != NULL ? intern_stack(w, depth) : NOT_SHOWN;
}

int32_t intern_raw(Walker *w, const RawFrame *fr, int32_t n) { /* (walk_one's rules on frames read before: remote.h) */
    int32_t depth = 0, i = 0;
    int any = 0;
    for (; i < n && depth < w->max_depth; i++) {
        if (fr[i].key == 0) continue; /* (not shown) */
        int32_t fi = map_get(&w->offs, fr[i].code, fr[i].key);
        if (fi == MISSING) fi = new_frame_of(w, (PyObject *)fr[i].code, NULL, fr[i].key);
        if (fi == NO_MEMORY) return NO_MEMORY;
        if (fi >= 0) w->buf[depth++] = fi;
        any |= fi != NOT_SHOWN;
    }
    while (i < n && fr[i].key == 0) i++;
    if (i < n) w->truncated++;
    return any || i < n ? intern_stack(w, depth) : NOT_SHOWN;
}

/* the thread ids of an iterable, into a C array (*out: buf, or a PyMem block to free); -1 with an exception set.
   An item that is no thread id (not an int, negative: sample(exclude_thread=-1)) is left out. */
Py_ssize_t read_ids(PyObject *skip, unsigned long *buf, Py_ssize_t cap, unsigned long **out) {
    *out = buf;
    PyObject *it = PyObject_GetIter(skip);
    if (it == NULL) return -1;
    Py_ssize_t n = 0;
    PyObject *item;
    while ((item = PyIter_Next(it)) != NULL) {
        unsigned long v = PyLong_Check(item) ? PyLong_AsUnsignedLong(item) : (unsigned long)-1;
        Py_DECREF(item);
        if (v == (unsigned long)-1 && PyErr_Occurred()) { PyErr_Clear(); continue; }
        if (n == cap) {
            cap *= 2;
            unsigned long *q = *out == buf ? PyMem_Malloc(cap * sizeof *q) : PyMem_Realloc(*out, cap * sizeof *q);
            if (q == NULL) { Py_DECREF(it); if (*out != buf) PyMem_Free(*out); PyErr_NoMemory(); return -1; }
            if (*out == buf) memcpy(q, buf, n * sizeof *q);
            *out = q;
        }
        (*out)[n++] = v;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) { if (*out != buf) PyMem_Free(*out); return -1; }
    return n;
}

static PyObject *walker_look(Walker *w, PyObject *skip) {
    unsigned long sbuf[32], *sk;
    Py_ssize_t nsk = read_ids(skip, sbuf, 32, &sk);
    if (nsk < 0) return NULL;
    /* made before the walk: allocating a container may run the garbage collector (3.11), and with it any
       Python code; an int or a dict insert does not */
    PyObject *out = PyDict_New();
    if (out == NULL) goto done;
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(me->interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        _PyInterpreterFrame *f = TOP_FRAME(ts);
        int32_t si = -1;
        int skipped = 0;
        for (Py_ssize_t k = 0; k < nsk && !skipped; k++) skipped = sk[k] == ts->thread_id;
        if (skipped) {
            while (f != NULL && !shown(f)) f = f->previous;
            if (f == NULL) continue; /* no Python frame: not in sys._current_frames either */
        } else if ((si = walk_one(w, f)) < 0) {
            if (si == NOT_SHOWN) continue;
            Py_CLEAR(out);
            goto done;
        }
        PyObject *key = PyLong_FromUnsignedLong(ts->thread_id), *val = PyLong_FromLong(si);
        int r = key == NULL || val == NULL ? -1 : PyDict_SetItem(out, key, val);
        Py_XDECREF(key);
        Py_XDECREF(val);
        if (r < 0) { Py_CLEAR(out); goto done; }
    }
done:
    if (sk != sbuf) PyMem_Free(sk);
    return out;
}

/* walk(frame) -> the stack index of frame's stack (frame and its callers), as look() reads a thread's: the main
   thread's own sampler reads it in its signal handler this way (the interrupted frame, handed to the handler) with
   no frame object made for the callers. A frame with nothing shown above it: the empty stack's index. */
static PyObject *walker_walk(Walker *w, PyObject *frame) {
    if (!PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "walk(frame): a frame object");
        return NULL;
    }
    _PyInterpreterFrame *f = ((PyFrameObject *)frame)->f_frame;
    int32_t si = walk_one(w, f);
    if (si == NOT_SHOWN) si = intern_stack(w, 0);
    if (si < 0) return NULL;
    w->last_walk = si;
    return PyLong_FromLong(si);
}

/* the first n local variables of interpreter frame f (its arguments), borrowed, into out: NULL where unset, a cell
   variable's content where it is one (captured by an inner function, as f_locals gives it); -1 when the code has
   fewer than n local variables */
static int args_of(_PyInterpreterFrame *f, PyObject **out, Py_ssize_t n) {
    PyCodeObject *co = (PyCodeObject *)FRAME_CODE(f);
    if (n < 0 || n > co->co_nlocalsplus) return -1;
    const char *kinds = PyBytes_AS_STRING(co->co_localspluskinds);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = f->localsplus[i];
        if (v != NULL && (kinds[i] & 0x40) && PyCell_Check(v)) v = PyCell_GET(v); /* (CO_FAST_CELL: pycore_code.h) */
        out[i] = v;
    }
    return 0;
}

/* frame_args(frame, n) -> tuple: the first n of a Python frame's local variables (its arguments, in co_varnames'
   order), each None where unset, read in place in its interpreter frame's localsplus (args_of): no f_locals dict
   (3.11, 3.12: built anew at each read, ~13 us on a cache cooled by a denoising step, for a UNet forward's twenty
   arguments). n beyond the code's local variables: ValueError. */
PyObject *frame_args(PyObject *m, PyObject *args) {
    PyObject *frame, *vals[64];
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n:frame_args", &PyFrame_Type, &frame, &n)) return NULL;
    if (n > 64 || args_of(((PyFrameObject *)frame)->f_frame, vals, n) < 0) {
        PyErr_SetString(PyExc_ValueError, "frame_args: n is 0 to the code's number of local variables (at most 64)");
        return NULL;
    }
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(out, i, Py_NewRef(vals[i] != NULL ? vals[i] : Py_None));
    return out;
}

/* whether a code run with these globals is a denoiser's forward: named "forward", its module's __name__ starting with
   one of prefixes (a tuple of str); -1 with an exception set */
static int denoiser_code(PyObject *code, PyObject *globals, PyObject *prefixes) {
    if (PyUnicode_CompareWithASCIIString(((PyCodeObject *)code)->co_name, "forward") != 0) return 0;
    if (globals == NULL || !PyDict_Check(globals)) return 0;
    static PyObject *key = NULL; /* "__name__", made once */
    if (key == NULL && (key = PyUnicode_InternFromString("__name__")) == NULL) return -1;
    PyObject *name = PyDict_GetItemWithError(globals, key); /* borrowed */
    if (name == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyUnicode_Check(name)) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(prefixes); i++) {
        Py_ssize_t r = PyUnicode_Tailmatch(name, PyTuple_GET_ITEM(prefixes, i), 0, PY_SSIZE_T_MAX, -1);
        if (r != 0) return r < 0 ? -1 : 1;
    }
    return 0;
}

#if PY_VERSION_HEX >= 0x030C0000
#define DEN_REQUEST_EXTRA PyUnstable_Eval_RequestCodeExtraIndex
#define DEN_GET_EXTRA PyUnstable_Code_GetExtra
#define DEN_SET_EXTRA PyUnstable_Code_SetExtra
#else
#define DEN_REQUEST_EXTRA _PyEval_RequestCodeExtraIndex
#define DEN_GET_EXTRA _PyCode_GetExtra
#define DEN_SET_EXTRA _PyCode_SetExtra
#endif

static Py_ssize_t den_extra = -2; /* the co_extra slot of each code's decision: 0 not made, 1 no, 2 yes (-1: none) */

/* whether interpreter frame f (shown) runs a denoiser forward, each code decided once (denoiser_code, with the globals
   of the first frame seen running it) and kept in a co_extra slot of its own (a dict keyed by code objects would hash
   each: a code's hash is computed from its contents at every lookup); -1 with an exception set */
static int denoiser_frame(_PyInterpreterFrame *f, PyObject *prefixes) {
    PyObject *code = FRAME_CODE(f);
    if (den_extra == -2) den_extra = DEN_REQUEST_EXTRA(NULL);
    void *x = NULL;
    if (den_extra >= 0 && DEN_GET_EXTRA(code, den_extra, &x) < 0) { PyErr_Clear(); x = NULL; }
    if (x != NULL) return (intptr_t)x == 2;
    int is = denoiser_code(code, f->f_globals, prefixes);
    if (is >= 0 && den_extra >= 0 && DEN_SET_EXTRA(code, den_extra, (void *)(intptr_t)(is ? 2 : 1)) < 0) PyErr_Clear();
    return is;
}

/* outer_denoiser(frame, prefixes) -> the outermost denoiser forward among frame and its callers, as
   steps.hooks._outer_denoiser finds by f_back (which makes a frame object for each caller on 3.11): None when there
   is none, frame when it is frame itself, True when it is one of the callers (the caller then walks to it).
   prefixes: the denoiser modules (core.steprules.DENOISER_MODULES; denoiser_frame). */
PyObject *outer_denoiser(PyObject *m, PyObject *args) {
    PyObject *frame, *prefixes;
    if (!PyArg_ParseTuple(args, "O!O!:outer_denoiser", &PyFrame_Type, &frame, &PyTuple_Type, &prefixes)) return NULL;
    _PyInterpreterFrame *top = ((PyFrameObject *)frame)->f_frame, *outer = NULL;
    for (_PyInterpreterFrame *f = top; f != NULL; f = f->previous) {
        if (!shown(f)) continue;
        int is = denoiser_frame(f, prefixes);
        if (is < 0) return NULL;
        if (is) outer = f;
    }
    if (outer == NULL) Py_RETURN_NONE;
    return Py_NewRef(outer == top ? frame : Py_True);
}

/* the running Python frame of this thread (the function a probe or a sys.monitoring callback is called from) */
static _PyInterpreterFrame *running(void) {
    _PyInterpreterFrame *f = TOP_FRAME(PyThreadState_Get());
#if PY_VERSION_HEX >= 0x030C0000
    while (f != NULL && f->owner == FRAME_OWNED_BY_CSTACK) f = f->previous;
#endif
    return f;
}

int running_args(PyObject **out, Py_ssize_t n, PyCodeObject **code) {
    _PyInterpreterFrame *f = running();
    if (f == NULL || !PyCode_Check(FRAME_CODE(f))) return -1;
    *code = (PyCodeObject *)FRAME_CODE(f);
    return args_of(f, out, n);
}

int running_inside_denoiser(PyObject *prefixes) {
    _PyInterpreterFrame *f = running();
    for (f = f != NULL ? f->previous : NULL; f != NULL; f = f->previous) {
        if (!shown(f)) continue;
        int is = denoiser_frame(f, prefixes);
        if (is != 0) return is;
    }
    return 0;
}

/* take() -> (frames, stacks) made since the previous take. Only those there at the call: each tuple's allocation may
   run the garbage collector (3.11), and with it Python code that can hand the GIL to the main thread, whose signal
   handler (sigtick.c) then makes frames and stacks (and may move the arrays); those stay for the next take. */
static PyObject *walker_take(Walker *w, PyObject *unused) {
    Py_ssize_t f0 = w->taken_frames, nf = w->n_frames, s0 = w->taken_stacks, ns = w->n_stacks;
    PyObject *frames = PyList_New(0), *stacks = PyList_New(0);
    if (frames == NULL || stacks == NULL) goto fail;
    for (Py_ssize_t i = f0; i < nf && i < w->n_frames; i++) { /* (w->n_frames below nf only after a reset) */
        WFrame fr = w->frames[i];
        Code c = w->codes[fr.code];
        PyObject *t = Py_BuildValue("(OiO)", c.code, (int)fr.line, c.module != NULL ? c.module : w->empty);
        if (t == NULL || PyList_Append(frames, t) < 0) { Py_XDECREF(t); goto fail; }
        Py_DECREF(t);
    }
    for (Py_ssize_t i = s0; i < ns && i < w->n_stacks; i++) {
        int32_t len = w->stacks[i].len;
        PyObject *t = PyTuple_New(len);
        if (t == NULL) goto fail;
        Py_ssize_t start = w->stacks[i].start; /* (read after the allocation: the array may have moved) */
        for (int32_t k = 0; k < len; k++) {
            PyObject *v = PyLong_FromLong(w->ids[start + k]);
            if (v == NULL) { Py_DECREF(t); goto fail; }
            PyTuple_SET_ITEM(t, k, v);
        }
        int rc = PyList_Append(stacks, t);
        Py_DECREF(t);
        if (rc < 0) goto fail;
    }
    if (w->n_frames >= nf && w->n_stacks >= ns) { /* (else a reset came meanwhile: indices start again at 0) */
        w->taken_frames = nf;
        w->taken_stacks = ns;
        w->unseen = (w->n_frames - nf) + (w->n_stacks - ns);
    }
    return Py_BuildValue("(NN)", frames, stacks);
fail:
    Py_XDECREF(frames);
    Py_XDECREF(stacks);
    return NULL;
}

/* forget everything, indices from 0: the code objects released (their addresses may be reused from now on), or
   carried to the process's next walker (keep: remote.c's codes_carry) */
static void walker_clear(Walker *w, int keep) {
    threads_clear(w);
    remote_clear(w);
    w->last_walk = -1;
    Code *codes = w->codes;
    Py_ssize_t n = w->n_codes;
    w->codes = NULL;
    w->n_codes = w->cap_codes = 0;
    PyMem_Free(w->frames);
    PyMem_Free(w->stacks);
    PyMem_Free(w->ids);
    PyMem_Free(w->stack_slots);
    w->frames = NULL;
    w->stacks = NULL;
    w->ids = NULL;
    w->stack_slots = NULL;
    w->n_frames = w->cap_frames = w->taken_frames = w->n_stacks = w->cap_stacks = w->taken_stacks = 0;
    w->n_ids = w->cap_ids = 0;
    w->stack_mask = 0;
    w->unseen = 0;
    map_clear(&w->code_map);
    map_clear(&w->offs);
    map_clear(&w->lines);
    if (keep) codes_carry(&codes, &n);
    for (Py_ssize_t i = 0; i < n; i++) { /* last: a code freed here may run Python code (a weakref callback) */
        Py_DECREF(codes[i].code);
        Py_XDECREF(codes[i].module);
    }
    PyMem_Free(codes);
}

static PyObject *walker_reset(Walker *w, PyObject *args) {
    int carry = 0;
    if (!PyArg_ParseTuple(args, "|p:reset", &carry)) return NULL;
    walker_clear(w, carry);
    Py_RETURN_NONE;
}

static int walker_init(Walker *w, PyObject *args, PyObject *kwds) {
    Py_ssize_t max_depth;
    PyObject *hidden;
    if (!PyArg_ParseTuple(args, "nO!:Walker", &max_depth, &PyFrozenSet_Type, &hidden)) return -1;
    if (max_depth < 0 || max_depth > INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "max_depth: 0 to 2**30");
        return -1;
    }
    int32_t *buf = PyMem_Malloc(((size_t)max_depth + 1) * sizeof(int32_t));
    PyObject *name = PyUnicode_InternFromString("__name__"), *empty = PyUnicode_FromString("");
    if (buf == NULL || name == NULL || empty == NULL) {
        PyMem_Free(buf);
        Py_XDECREF(name);
        Py_XDECREF(empty);
        return buf == NULL ? (PyErr_NoMemory(), -1) : -1;
    }
    walker_clear(w, 0);
    if (codes_adopt(w, hidden) < 0) walker_clear(w, 0); /* (on no memory, nothing carried) */
    PyMem_Free(w->buf);
    w->buf = buf;
    w->max_depth = max_depth;
    Py_XSETREF(w->hidden, Py_NewRef(hidden));
    Py_XSETREF(w->name, name);
    Py_XSETREF(w->empty, empty);
    w->truncated = 0;
    w->remote_on = 1;
    w->own_on = 1;
    return 0;
}

static void walker_dealloc(Walker *w) {
    if (w->wake_fd1 > 0) close(w->wake_fd1 - 1);
    walker_clear(w, 1);
    PyMem_Free(w->buf);
    Py_XDECREF(w->hidden);
    Py_XDECREF(w->name);
    Py_XDECREF(w->empty);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef walker_methods[] = {
    {"look", (PyCFunction)walker_look, METH_O,
     "look(skip) -> {thread id: stack index, or -1 for a thread of skip}: every thread with a Python frame"},
    {"walk", (PyCFunction)walker_walk, METH_O,
     "walk(frame) -> the stack index of frame and its callers (the main thread's signal handler; no frame object made)"},
    {"sample", (PyCFunction)walker_sample, METH_VARARGS,
     "sample(skip, period_ns, cap_ns, lazy=False) -> (seen, ran, n): every thread's look with its accounting "
     "(threads.c; lazy: no row for a thread still since the last look or back at its last row's stack)"},
    {"blocked", (PyCFunction)walker_blocked, METH_O,
     "blocked(skip) -> n, or -1: the threads read before recorded again when none has run since (threads.c)"},
    {"unmoved", (PyCFunction)walker_unmoved, METH_O,
     "unmoved(skip) -> n, or -1: how many threads read before, when none has run since; nothing recorded (threads.c)"},
    {"idle", (PyCFunction)walker_idle, METH_VARARGS,
     "idle(t_ns, ran) -> bool: whether the last sample() counts as idle (its threads' CPU within the idle share)"},
    {"hand_over", (PyCFunction)walker_hand_over, METH_VARARGS,
     "hand_over(tid, native, t_ns, cpu_ns, stack, slack): tid's previous sample, for sample() (threads.c)"},
    {"forget", (PyCFunction)walker_forget, METH_VARARGS,
     "forget(tid, whole=True) -> (t_ns, cpu_ns, stack) or None: tid's previous sample dropped (threads.c)"},
    {"notify", (PyCFunction)walker_notify, METH_NOARGS, "Wake a run() that waits (looks.c)."},
    {"own_stop", (PyCFunction)walker_own_stop, METH_NOARGS,
     "Delete the busy threads' own timers (ownclock.c) and stop their sampling; run() arms them again."},
    {"run", (PyCFunction)walker_run, METH_VARARGS,
     "run(lock, sample_lock, skip, period_ns, cap_ns, next_t, until_ns, main_ident, main_state, active, stop_fd, "
     "stop_sigs, finished, limit, mem, rss_fd, page, mem_every, quiet, quiet_ns) -> (reason, looks, n, next_t, "
     "seen, ran, look_cpu_ns, stop_bytes, quiet): looks until something else is due (looks.c)"},
    {"lane", (PyCFunction)walker_lane, METH_VARARGS,
     "lane(lock, until_ns, mem, rss_fd, page, period_ns, stop_fd, stop_sigs, finished, limit) -> (reason, rows, "
     "stop_bytes): the memory lane's RSS rows read without the GIL until something else is due (looks.c)"},
    {"rows", (PyCFunction)walker_rows, METH_NOARGS,
     "rows() -> [(t_ns, thread id, stack, wall_ns, cpu_ns)] recorded since the last call (threads.c)"},
    {"take", (PyCFunction)walker_take, METH_NOARGS,
     "take() -> (frames, stacks) made since the last take: (code, line or -1, module) and leaf-first tuples"},
    {"reset", (PyCFunction)walker_reset, METH_VARARGS,
     "reset(carry=False): forget every code, frame and stack (codes released, or held for the next walker made)"},
    {NULL}};

static PyMemberDef walker_members[] = {
    {"max_depth", Py_T_PYSSIZET, offsetof(Walker, max_depth), Py_READONLY, "frames kept a stack, nearest the leaf"},
    {"truncated", Py_T_LONGLONG, offsetof(Walker, truncated), Py_READONLY, "walks cut at max_depth"},
    {"unseen", Py_T_PYSSIZET, offsetof(Walker, unseen), Py_READONLY, "frames and stacks made since the last take"},
    {"codes", Py_T_PYSSIZET, offsetof(Walker, n_codes), Py_READONLY, "code objects held (the previous walker's too)"},
    {"moved", Py_T_PYSSIZET, offsetof(Walker, moved), Py_READONLY,
     "threads the last sample() walked within their slack (their CPU clock moved; not in its ran list)"},
    {"quiet_looks", Py_T_LONGLONG, offsetof(Walker, quiet_looks), Py_READONLY,
     "run()'s looks so far (the last run's once it ended) at which no thread's CPU clock had moved, made without the "
     "GIL (no rows: looks.c)"},
    {"remote_looks", Py_T_LONGLONG, offsetof(Walker, remote_looks), Py_READONLY,
     "run()'s looks, all runs, that read a busy thread's stack without the GIL (remote.c)"},
    {"remote_on", Py_T_BOOL, offsetof(Walker, remote_on), 0,
     "whether run() may read a busy thread's stack without the GIL (remote.c; True by default)"},
    {"remote_misses", Py_T_LONGLONG, offsetof(Walker, remote_misses), Py_READONLY,
     "threads such a look could not read without the GIL (held it too long, ran meanwhile, a code not held yet)"},
    {"own_on", Py_T_BOOL, offsetof(Walker, own_on), 0,
     "whether run() may leave a busy thread to a timer of its own (ownclock.c; True by default)"},
    {"own_threads", Py_T_LONGLONG, offsetof(Walker, own_threads), Py_READONLY,
     "times a busy thread's own timer was armed (ownclock.c), all runs"},
    {"own_samples", Py_T_LONGLONG, offsetof(Walker, own_samples), Py_READONLY,
     "samples those timers' signal handlers took and accounted (ownclock.c)"},
    {"own_period", Py_T_LONGLONG, offsetof(Walker, own_period), 0,
     "the busy threads' own timers' period (ns; the overhead budget's), 0: the looks' (at least that in any case)"},
    {"own_ns", Py_T_LONGLONG, offsetof(Walker, own_ns), Py_READONLY,
     "the time (ns) those signal handlers took in their threads, as accounted so far (ownclock.c)"},
    {"own_misses", Py_T_LONGLONG, offsetof(Walker, own_misses), Py_READONLY,
     "signals whose handler could not read its thread's stack (a code not held yet, a full ring: ownclock.c)"},
    {"deferred", Py_T_LONGLONG, offsetof(Walker, deferred), Py_READONLY,
     "threads the last sample(lazy=True) left without a row (not run since the last look, or back at their last "
     "row's stack)"},
    {"n_rows", Py_T_PYSSIZET, offsetof(Walker, n_rows), Py_READONLY, "sample rows waiting for rows()"},
    {"last_walk", Py_T_INT, offsetof(Walker, last_walk), Py_READONLY,
     "the stack index of the main thread's last walk (walk(), or the C signal handler's sample), -1: none"},
    {NULL}};

PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stepscope.record.native._native.Walker",
    .tp_basicsize = sizeof(Walker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Walker(max_depth, hidden_files): every thread's Python stack read without frame objects "
              "(stepscope.record.sampling.sampler)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)walker_init,
    .tp_dealloc = (destructor)walker_dealloc,
    .tp_methods = walker_methods,
    .tp_members = walker_members,
};

#endif /* STEPSCOPE_STACKWALK */
