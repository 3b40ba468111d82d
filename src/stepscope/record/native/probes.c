/* stepscope.record.native._native: the Probe types of the 3.11 instrumented code (declared in probes.h). */

#include "probes.h"

#include "outer.h"

typedef struct {
    PyObject_HEAD
    int32_t idx;
} ProbeObject;

static PyObject *probe_enter(ProbeObject *self, PyObject *unused) { push(self->idx); Py_RETURN_NONE; }

static PyObject *probe_error(ProbeObject *self, PyObject *unused) {
    TState *t = tls;
    if (t == NULL || t->depth == 0 || t->stack[t->depth - 1].idx != self->idx) Py_RETURN_NONE;
    PyObject *exc = PyErr_GetHandledException();
    if (exc != NULL && exc != Py_None) {
        Frame *f = &t->stack[t->depth - 1];
        Py_XSETREF(f->err, Py_NewRef((PyObject *)Py_TYPE(exc)));
    }
    Py_XDECREF(exc);
    Py_RETURN_NONE;
}

static PyObject *probe_exit(ProbeObject *self, PyObject *unused) { pop(self->idx, NULL); Py_RETURN_NONE; }

static int probe_init(ProbeObject *self, PyObject *args, PyObject *kw) {
    int idx;
    if (!PyArg_ParseTuple(args, "i", &idx)) return -1;
    self->idx = idx;
    return 0;
}

static PyObject *probe_repr(ProbeObject *self) {
    PyObject *no = PyList_GetItem(names, self->idx);
    if (no == NULL) { PyErr_Clear(); return PyUnicode_FromFormat("<stepscope native probe %d>", self->idx); }
    return PyUnicode_FromFormat("<stepscope native probe %R>", PyTuple_GET_ITEM(no, 0));
}

static PyObject *probe_get_index(ProbeObject *self, void *c) { return PyLong_FromLong(self->idx); }

static PyMethodDef probe_methods[] = {
    {"enter", (PyCFunction)probe_enter, METH_NOARGS, "The traced call starts (pushes it on this thread's stack)."},
    {"error", (PyCFunction)probe_error, METH_NOARGS, "The call is ending by the exception being handled."},
    {"exit", (PyCFunction)probe_exit, METH_NOARGS, "The call ends: one finished record."},
    {NULL}};

static PyGetSetDef probe_getset[] = {{"index", (getter)probe_get_index, NULL, "code index (register)", NULL}, {NULL}};

PyTypeObject ProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stepscope.record.native._native.Probe",
    .tp_basicsize = sizeof(ProbeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Probe(index): the native recorder's calls for the 3.11 instrumented code of one traced function.",
    .tp_methods = probe_methods,
    .tp_getset = probe_getset,
    .tp_init = (initproc)probe_init,
    .tp_new = PyType_GenericNew,
    .tp_repr = (reprfunc)probe_repr,
};

/* ---- DenoiserProbe ---------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    int32_t idx;
    PyObject *probe; /* the Python probe: the calls that are not nested */
} DenoiserProbeObject;

static PyObject *dprobe_enter(DenoiserProbeObject *self, PyObject *unused) {
    int64_t step = open_step();
    if (step >= 0) {
        push_step(self->idx, step);
        Py_RETURN_NONE;
    }
    if (outer_enter(self->idx)) Py_RETURN_NONE; /* (the outermost call in C, outer.c; else its Python probe's) */
    return PyObject_CallMethod(self->probe, "enter", NULL); /* (its frame: the instrumented code's, the caller) */
}

static PyObject *dprobe_error(DenoiserProbeObject *self, PyObject *unused) {
    if (native_top(self->idx)) return probe_error((ProbeObject *)self, NULL); /* (idx: the same offset) */
    return PyObject_CallMethod(self->probe, "error", NULL);
}

static PyObject *dprobe_exit(DenoiserProbeObject *self, PyObject *unused) {
    if (native_top(self->idx)) {
        pop(self->idx, NULL);
        Py_RETURN_NONE;
    }
    if (outer_exit(self->idx)) Py_RETURN_NONE;
    return PyObject_CallMethod(self->probe, "exit", NULL);
}

static int dprobe_init(DenoiserProbeObject *self, PyObject *args, PyObject *kw) {
    int idx;
    PyObject *probe;
    if (!PyArg_ParseTuple(args, "iO", &idx, &probe)) return -1;
    self->idx = idx;
    Py_XSETREF(self->probe, Py_NewRef(probe));
    return 0;
}

static void dprobe_dealloc(DenoiserProbeObject *self) {
    Py_XDECREF(self->probe);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef dprobe_methods[] = {
    {"enter", (PyCFunction)dprobe_enter, METH_NOARGS, "The call starts: nested, recorded here; else the Python probe's."},
    {"error", (PyCFunction)dprobe_error, METH_NOARGS, "The call is ending by the exception being handled."},
    {"exit", (PyCFunction)dprobe_exit, METH_NOARGS, "The call ends."},
    {NULL}};

PyTypeObject DenoiserProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stepscope.record.native._native.DenoiserProbe",
    .tp_basicsize = sizeof(DenoiserProbeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "DenoiserProbe(index, probe): a denoiser forward's calls for the 3.11 instrumented code.",
    .tp_methods = dprobe_methods,
    .tp_getset = probe_getset,
    .tp_init = (initproc)dprobe_init,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)dprobe_dealloc,
    .tp_repr = (reprfunc)probe_repr,
};
