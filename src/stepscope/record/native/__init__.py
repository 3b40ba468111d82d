"""The C recorder's extension, ``stepscope.record.native._native`` (issue 31): loaded here, once; nothing else.

This folder holds its C sources as .c/.h pairs (``module.c`` says what each part does), the generated ``layout.h``
(the Python tables it must agree with) and ``_native.pyi``, the stub of everything the module exposes. It is built by
setup.py (``pip install``; the recipe: setup.py's ``native_sources()``) or in place by ``scripts/build_native.py``
(``make native``: every interpreter's ``.so`` side by side here, git-ignored).

``ext`` is the extension module, or None when the pure-Python recorder records every call: with
``STEPSCOPE_RECORDER=python``, on an interpreter it was not built for (no compiler: nothing to say, ``load_error``
stays None), or when its ``.so`` is there but cannot load (another ABI, a missing symbol, a broken file:
``load_error`` holds the one line, which the session notes in the run's environment facts, never on the program's
stderr). ``RECORDER`` names the recorder in use, "native" or "python". Decided once, when this package is imported.

Which traced calls the C recorder takes is ``tracing.recorder``'s choice, not this package's. Stdlib only, and
nothing else of stepscope is imported here (the recorder's lowest layer: ``spans.buffer`` and ``tracing`` import it).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: the extension's dotted name
EXTENSION = __name__ + "._native"

#: the ``stepscope.record.native._native`` module when the C recorder is in use, else None
ext: ModuleType | None = None
#: why the C recorder could not load (one line), or None (loaded, not built here, or not wanted)
load_error: str | None = None

if os.environ.get("STEPSCOPE_RECORDER", "").strip().lower() != "python":
    try:
        ext = importlib.import_module(EXTENSION)
    except ModuleNotFoundError as e:  # not built here (no compiler, or this interpreter's .so missing)
        if e.name != EXTENSION:
            load_error = f"native recorder: cannot load {EXTENSION}: {e}"
    except Exception as e:  # a .so built for another ABI, a missing symbol, not a shared object...
        load_error = f"native recorder: cannot load {EXTENSION}: {type(e).__name__}: {e}"

#: "native" or "python"
RECORDER = "native" if ext is not None else "python"

#: the extension for the recorder thread's own wait (``park``, unseen by a profiler the program starts), whichever
#: recorder records traced calls: ``ext``, or under ``STEPSCOPE_RECORDER=python`` the module when it loads; else None
waits: ModuleType | None = ext
if ext is None and load_error is None:
    try:
        waits = importlib.import_module(EXTENSION)
    except Exception:
        waits = None
