"""The C part of stepscope: ``stepscope.record._native``, the tracer's hot path (src/stepscope/record/_native.c and the
``_native_*.h`` parts it includes), and stepscope's start-up hook, ``stepscope-follow.pth``.

``optional=True``: a machine without a C compiler still installs stepscope, which then records with its
pure-Python recorder (``stepscope.record.tracing.native``). Everything else is in pyproject.toml.

The hook (src/stepscope-follow.pth) goes to the top of the wheel, that is into site-packages, by a normal install and
by an editable one (``pip install -e .``): Python runs it at every start; it does nothing unless ``STEPSCOPE_FOLLOW``
is set (one ``in os.environ`` test), and under ``stepscope run`` makes each Python process of the program record
itself (``stepscope.record.processes.startup_hook``) without touching ``PYTHONPATH`` or ``sys.path``.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HOOK = "stepscope-follow.pth"
HOOK_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src", HOOK)


class build_py_with_hook(build_py):
    """``build_py`` that also puts ``HOOK`` at the top of the built tree (a wheel's root: site-packages); in an editable
    build (setuptools' ``editable_wheel``, which makes the wheel of the install folder, not of ``build_lib``), there."""

    def run(self):
        super().run()
        self.copy_file(HOOK_SRC, os.path.join(self.build_lib, HOOK), preserve_mode=0)
        if getattr(self, "editable_mode", False):
            install = self.get_finalized_command("install")
            self.copy_file(HOOK_SRC, os.path.join(install.install_lib, HOOK), preserve_mode=0)

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, HOOK)]


setup(ext_modules=[Extension("stepscope.record._native", ["src/stepscope/record/_native.c"], optional=True,
                             depends=["src/stepscope/record/_native_gen.h", "src/stepscope/record/_native_probes.h",
                                      "src/stepscope/record/_native_block.h"],
                             extra_compile_args=["-O2", "-std=c11"],
                             libraries=[] if sys.platform == "darwin" else ["pthread"])],
      cmdclass={"build_py": build_py_with_hook})
