"""Modules that raise while they import, as ComfyUI's custom nodes do: tracebacks caught and printed, one
through importlib.import_module, a deprecation warning at import (stacklevel=2 names the importer), and
an uncaught one at the end."""
import importlib
import traceback

import tpimp.good

print(tpimp.good.work(2))
for name in ("tpimp.broken", "tpimp.outer", "tpimp.missing", "tpimp.syntax"):
    try:
        __import__(name)
    except Exception:
        print(traceback.format_exc())
try:
    importlib.import_module("tpimp.outer")
except RuntimeError:
    print(traceback.format_exc())
try:
    from tpimp import broken  # noqa: F401
except RuntimeError as e:
    print(repr(e), [(f.name, f.lineno) for f in traceback.extract_tb(e.__traceback__)])
import tpimp.old  # noqa: E402

print(tpimp.old.work(3))
import tpimp.outer  # noqa: E402,F401
