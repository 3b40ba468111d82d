"""The device analysis's C part, ``stepscope.device.native._kscan`` (``kscan.c``): a Kineto trace's ``traceEvents``
array scanned straight into columns (``device.kineto.load``'s fast reader), built with the recorder's extension
(setup.py's ``native_extensions()``; in place: ``scripts/build_native.py``, ``make native``).

``scan`` is the module's ``scan``, or None when it is not built for this interpreter, cannot load (``load_error``:
one line), or is turned off with ``STEPSCOPE_KSCAN=0``: the msgspec reader then reads every trace, with the same
result. Stdlib only."""

from __future__ import annotations

import importlib
import os

EXTENSION = __name__ + "._kscan"

scan = None
load_error: str | None = None

if os.environ.get("STEPSCOPE_KSCAN", "").strip() != "0":
    try:
        scan = importlib.import_module(EXTENSION).scan
    except ModuleNotFoundError as e:  # not built here
        if e.name != EXTENSION:
            load_error = f"trace scanner: cannot load {EXTENSION}: {e}"
    except Exception as e:  # another ABI, a broken file
        load_error = f"trace scanner: cannot load {EXTENSION}: {type(e).__name__}: {e}"
