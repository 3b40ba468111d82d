/* stepscope.device.native._kscan: the module's one entry, scan (kscan.c says what it returns). */
#ifndef STEPSCOPE_KSCAN_H
#define STEPSCOPE_KSCAN_H

#include <Python.h>

PyMODINIT_FUNC PyInit__kscan(void);

#endif
