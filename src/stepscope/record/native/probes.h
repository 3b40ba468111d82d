/* stepscope.record.native._native: the Probe types that Python 3.11's instrumented code calls (tracing.codeswap;
   probes.c). Probe(index): a plain traced function's calls, recorded in C. DenoiserProbe(index, probe): a denoiser's
   forward: a call inside an open denoiser call is recorded in C with that call's step, any other goes to the Python
   probe (tracing.probes.Probe) it holds. */

#ifndef STEPSCOPE_NATIVE_PROBES_H
#define STEPSCOPE_NATIVE_PROBES_H

#include "recorder.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

extern PyTypeObject ProbeType;
extern PyTypeObject DenoiserProbeType;

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
