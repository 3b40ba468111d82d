"""The C part of stepscope: ``stepscope._native``, the tracer's hot path (src/stepscope/_native.c and the
``_native_*.h`` parts it includes).

``optional=True``: a machine without a C compiler still installs stepscope, which then records with its
pure-Python recorder (``stepscope.tracing.native``). Everything else is in pyproject.toml.
"""

import sys

from setuptools import Extension, setup

setup(ext_modules=[Extension("stepscope._native", ["src/stepscope/_native.c"], optional=True,
                             depends=["src/stepscope/_native_gen.h", "src/stepscope/_native_probes.h",
                                      "src/stepscope/_native_block.h"],
                             extra_compile_args=["-O2", "-std=c11"],
                             libraries=[] if sys.platform == "darwin" else ["pthread"])])
