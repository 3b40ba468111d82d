/* stepscope.record.native._native: the ContextVar helpers, and generators, coroutines and async generators on 3.12+
   (declared in gen.h; tracing.probes.Probe's steps in C). */

#include "gen.h" /* (first: Python.h before any system header) */

#include <string.h>

int64_t parent_now(PyObject *prev) {
    int64_t p = 0;
    if (prev != NULL && PyList_CheckExact(prev) && PyList_GET_SIZE(prev) > REC_ID) {
        PyObject *s = PyList_GET_ITEM(prev, REC_ID);
        if (PyLong_CheckExact(s)) p = PyLong_AsLongLong(s);
    }
    TState *t = tls;
    if (t != NULL && t->depth > 0 && t->stack[t->depth - 1].sid > p) p = t->stack[t->depth - 1].sid;
    return p;
}

/* this code index's record if it is the current one (a new reference), else NULL */
static PyObject *current_of(int32_t idx) {
    PyObject *rec = cv_get();
    if (PyList_CheckExact(rec) && PyList_GET_SIZE(rec) == REC_LEN
        && PyList_GET_ITEM(rec, REC_PROBE) == PyList_GET_ITEM(probe_objs, idx))
        return rec;
    Py_DECREF(rec);
    return NULL;
}

static PyObject *frame_key(void) { /* the running frame's address (id(frame)), or NULL */
    PyFrameObject *f = PyEval_GetFrame();
    if (f == NULL) return NULL;
    return PyLong_FromVoidPtr(f);
}

/* the parked record of the running frame (removed from the table when take), a new reference, or NULL */
static PyObject *parked_rec(int take) {
    if (PyDict_GET_SIZE(parked) == 0) return NULL;
    PyObject *key = frame_key();
    if (key == NULL) { PyErr_Clear(); return NULL; }
    PyObject *rec = PyDict_GetItemWithError(parked, key);
    if (rec != NULL) {
        Py_INCREF(rec);
        if (take && PyDict_DelItem(parked, key) < 0) PyErr_Clear();
    } else {
        PyErr_Clear();
    }
    Py_DECREF(key);
    return rec;
}

void gen_start(int32_t idx) {
    PyObject *stale = parked_rec(1); /* a frame that ended with no event (3.13's close) and was freed, at this address */
#if PY_VERSION_HEX >= 0x030D0000
    if (PyDict_GET_SIZE(parked_gen) > 0) { /* what was noted of its generator: its span ends (tracing.probes) */
        PyObject *key = frame_key(), *note = NULL;
        if (key != NULL && PyDict_Pop(parked_gen, key, &note) < 0) PyErr_Clear();
        if (stale != NULL && note != NULL) {
            PyObject *pair = PyTuple_Pack(2, stale, note);
            if (pair == NULL || PyList_Append(orphans, pair) < 0) PyErr_Clear();
            Py_XDECREF(pair);
        }
        Py_XDECREF(note);
        Py_XDECREF(key);
    }
#endif
    Py_XDECREF(stale);
    PyObject *prev = cv_get();
    int64_t parent = parent_now(prev), sid = ++last_sid;
    PyObject *rec = PyList_New(REC_LEN); /* (its items set below: a record never escapes with a NULL one) */
    if (rec == NULL) { PyErr_Clear(); Py_DECREF(prev); return; }
    PyList_SET_ITEM(rec, REC_ID, PyLong_FromLongLong(sid));
    PyList_SET_ITEM(rec, REC_START, PyLong_FromLongLong(now_ns()));
    PyList_SET_ITEM(rec, REC_PARENT, opt_id(parent));
    PyList_SET_ITEM(rec, REC_PROBE, Py_NewRef(PyList_GET_ITEM(probe_objs, idx)));
    PyList_SET_ITEM(rec, REC_ATTRS, Py_NewRef(Py_None));
    PyList_SET_ITEM(rec, REC_NAME, Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(names, idx), 0)));
    PyList_SET_ITEM(rec, REC_ERROR, Py_NewRef(Py_None));
    PyList_SET_ITEM(rec, REC_RESTORE, prev); /* (the reference cv_get gave) */
    if (PyList_GET_ITEM(rec, REC_ID) == NULL || PyList_GET_ITEM(rec, REC_START) == NULL
        || PyList_GET_ITEM(rec, REC_PARENT) == NULL) {
        PyErr_Clear();
        Py_DECREF(rec);
        return;
    }
    cv_set(rec);
    Py_DECREF(rec);
}

#if PY_VERSION_HEX >= 0x030D0000
/* 3.13 closes a generator suspended outside any try block with no event (its frame just completes): note, per frame
   address, a weak reference to the generator and a 16-byte bytearray (made once), whose int64 time (ns) and uint64
   thread id of this suspension are rewritten in place at each yield (no allocation), so that
   tracing.probes.end_closed can end the span at its last suspension once the generator is closed or freed */
static void note_suspension(PyObject *key) {
    struct { int64_t t; uint64_t tid; } when = {now_ns(), tls != NULL ? tls->tid : PyThread_get_thread_ident()};
    PyObject *note = PyDict_GetItemWithError(parked_gen, key); /* borrowed */
    if (note != NULL && PyTuple_CheckExact(note) && PyTuple_GET_SIZE(note) == 2) {
        PyObject *buf = PyTuple_GET_ITEM(note, 1);
        if (PyByteArray_CheckExact(buf) && PyByteArray_GET_SIZE(buf) == sizeof when) {
            memcpy(PyByteArray_AS_STRING(buf), &when, sizeof when);
            return;
        }
    }
    PyErr_Clear();
    PyFrameObject *f = PyEval_GetFrame();
    PyObject *gen = f != NULL ? PyFrame_GetGenerator(f) : NULL;
    PyObject *ref = gen != NULL ? PyWeakref_NewRef(gen, NULL) : NULL;
    Py_XDECREF(gen);
    PyObject *buf = ref != NULL ? PyByteArray_FromStringAndSize((const char *)&when, sizeof when) : NULL;
    note = buf != NULL ? PyTuple_Pack(2, ref, buf) : NULL;
    if (note == NULL || PyDict_SetItem(parked_gen, key, note) < 0) PyErr_Clear();
    Py_XDECREF(note);
    Py_XDECREF(buf);
    Py_XDECREF(ref);
}
#endif

void gen_yield(int32_t idx) { /* Probe.suspend */
    PyObject *rec = current_of(idx);
    if (rec == NULL) return;
    PyObject *key = frame_key();
    if (key == NULL || PyDict_SetItem(parked, key, rec) < 0) PyErr_Clear();
#if PY_VERSION_HEX >= 0x030D0000
    if (key != NULL) note_suspension(key);
#endif
    Py_XDECREF(key);
    cv_set(PyList_GET_ITEM(rec, REC_RESTORE));
    Py_DECREF(rec);
}

void gen_resume(void) { /* Probe.resume */
    PyObject *rec = parked_rec(1);
    if (rec == NULL) return;
    PyList_SetItem(rec, REC_RESTORE, cv_get());
    cv_set(rec);
    Py_DECREF(rec);
}

static PyObject *gen_record(int32_t idx, int take) { /* Probe._record */
    PyObject *rec = parked_rec(take);
    return rec != NULL ? rec : current_of(idx);
}

void gen_end(int32_t idx, PyObject *exc_type) { /* Probe.error (exc_type not NULL), then Probe.exit */
    int64_t end = now_ns();
    PyObject *rec = gen_record(idx, 1);
    if (rec == NULL) return;
    PyObject *sid = PyList_GET_ITEM(rec, REC_ID);
    if (PyLong_CheckExact(sid)) {
        PyObject *e = PyList_GET_ITEM(rec, REC_ERROR);
        if (exc_type != NULL && !PyType_IsSubtype((PyTypeObject *)exc_type, (PyTypeObject *)PyExc_GeneratorExit))
            e = exc_type; /* (a closed generator ended normally) */
        if (n_fin < cap_fin || grow_fin() == 0) {
            Py_ssize_t i = n_fin++;
            PyObject *parent = PyList_GET_ITEM(rec, REC_PARENT);
            recs[i].sid = PyLong_AsLongLong(sid);
            recs[i].parent = PyLong_CheckExact(parent) ? PyLong_AsLongLong(parent) : 0;
            recs[i].idx = idx;
            recs[i].start = PyLong_AsLongLong(PyList_GET_ITEM(rec, REC_START));
            recs[i].end = end;
            recs[i].step = -1;
            recs[i].tid = tls != NULL ? tls->tid : PyThread_get_thread_ident();
            recs[i].err = PyType_Check(e) ? Py_NewRef(e) : NULL;
            if (PyErr_Occurred()) PyErr_Clear();
        } else {
            dropped++;
        }
    }
    cv_set(PyList_GET_ITEM(rec, REC_RESTORE));
    Py_DECREF(rec);
}
