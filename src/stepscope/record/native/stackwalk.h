/* stepscope.record.native._native: the sampler's stack walk (stackwalk.c; issue 41).

   A Walker reads every thread's Python stack from the recorder thread without making a frame object: it follows
   each thread state's chain of interpreter frames (CPython's internal _PyInterpreterFrame, read-only) and keeps what
   it sees in its own tables: the code objects (strong references: an address is never reused while the walker holds
   it), one frame per (code, line), one stack per distinct sequence of frames. A look gives each thread's stack as a
   number; what is new (frames, stacks) is handed to Python in bulk (take), where each frame's function, module, file
   and line are resolved once (sampling.sampler.Sampler). Free-threaded builds have no walker (the extension needs the
   GIL: recorder.h). */

#ifndef STEPSCOPE_NATIVE_STACKWALK_H
#define STEPSCOPE_NATIVE_STACKWALK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* the interpreters whose frames stackwalk.c knows (3.11 to 3.13), with the GIL */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define STEPSCOPE_STACKWALK 1
/* the type stepscope.record.native._native.Walker (module.c adds it to the module) */
extern PyTypeObject WalkerType;
/* frame_args(frame, n) -> a tuple of the frame's first n local variables (its arguments), read in place (stackwalk.c) */
PyObject *frame_args(PyObject *m, PyObject *args);
/* outer_denoiser(frame, prefixes) -> None, frame or True: the outermost denoiser forward (stackwalk.c) */
PyObject *outer_denoiser(PyObject *m, PyObject *args);
/* the running frame's code (*code) and first n local variables (out: borrowed, NULL where unset, cells' contents):
   0, or -1 when there is no running Python frame or its code has fewer (outer.c) */
int running_args(PyObject **out, Py_ssize_t n, PyCodeObject **code);
/* whether a caller of the running frame runs a denoiser forward (prefixes: outer_denoiser's): 1, 0, or -1 with an
   exception set (outer.c) */
int running_inside_denoiser(PyObject *prefixes);
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
