/* stepscope.record.native._native: the sys.monitoring callbacks (declared in monitor.h). */

#include "monitor.h"

#include "gen.h"
#include "outer.h"

/* the event of a code with a Python probe, handed to its Python callback (set_forward) */
static PyObject *pass_on(int ev, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *cb = forward[ev];
    if (cb == NULL) Py_RETURN_NONE;
    return PyObject_Vectorcall(cb, args, nargs, NULL);
}

/* a callback with only the native body (resume, yield): a Python probe's code is passed on, an untraced one disabled */
#define LOCAL_CALLBACK(fname, ev, body)                                             \
    PyObject *fname(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {        \
        if (nargs < 2) Py_RETURN_NONE;                                              \
        intptr_t x = extra_of(args[0]);                                             \
        if (x >= 2) { body; Py_RETURN_NONE; }                                       \
        if (x == 1) return pass_on(ev, args, nargs);                                \
        return Py_NewRef(disable);                                                  \
    }

/* the code index of a native code (co_extra x >= 2) */
#define IDX ((int32_t)(x - 2))

/* a denoiser's code: the event is recorded here when `native` (a nested call) or `outer` (the outermost call in C,
   outer.c), else passed on to its Python probe */
#define DENOISER_OR(ev, native, outer)                                              \
    if (gen_flags[IDX] == 2) {                                                      \
        if ((native) || (outer)) { Py_RETURN_NONE; }                                \
        return pass_on(ev, args, nargs);                                            \
    }

PyObject *mon_start(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2) {
        int64_t step;
        DENOISER_OR(EV_START, (step = open_step()) >= 0 && (push_step(IDX, step), 1), outer_enter(IDX))
        if (gen_flags[IDX]) gen_start(IDX); else push(IDX);
        Py_RETURN_NONE;
    }
    if (x == 1) return pass_on(EV_START, args, nargs);
    return Py_NewRef(disable);
}

PyObject *mon_return(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2) {
        DENOISER_OR(EV_RETURN, native_top(IDX) && (pop(IDX, NULL), 1), outer_exit(IDX))
        if (gen_flags[IDX]) gen_end(IDX, NULL); else pop(IDX, NULL);
        Py_RETURN_NONE;
    }
    if (x == 1) return pass_on(EV_RETURN, args, nargs);
    return Py_NewRef(disable);
}

LOCAL_CALLBACK(mon_resume, EV_RESUME, if (gen_flags[IDX] == 1) gen_resume())
LOCAL_CALLBACK(mon_yield, EV_YIELD, if (gen_flags[IDX] == 1) gen_yield(IDX))

PyObject *mon_unwind(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2) {
        DENOISER_OR(EV_UNWIND, native_top(IDX) && (pop(IDX, (PyObject *)Py_TYPE(args[2])), 1), 0)
        if (gen_flags[IDX]) gen_end(IDX, (PyObject *)Py_TYPE(args[2])); else pop(IDX, (PyObject *)Py_TYPE(args[2]));
        Py_RETURN_NONE;
    }
    if (x == 1) return pass_on(EV_UNWIND, args, nargs);
    Py_RETURN_NONE; /* (a global event: cannot be disabled) */
}

PyObject *mon_throw(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3) Py_RETURN_NONE;
    intptr_t x = extra_of(args[0]);
    if (x >= 2 && gen_flags[IDX] == 1) gen_resume();
    else if (x == 1) return pass_on(EV_THROW, args, nargs);
    Py_RETURN_NONE;
}
