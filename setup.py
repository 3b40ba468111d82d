"""The C part of stepscope: ``stepscope.record.native._native``, the tracer's hot path (the .c/.h pairs of
src/stepscope/record/native/), ``stepscope.device.native._kscan``, the Kineto trace scanner, and stepscope's start-up
hook, ``stepscope-follow.pth``.

The extensions' recipes (sources, headers, flags) are ``native_sources()`` and ``kscan_sources()`` (both:
``native_extensions()``), the one place that lists them:
setuptools builds from it here, and ``scripts/build_native.py`` (``make native``: an in-place build for the
interpreters that run stepscope from ``PYTHONPATH=src`` and have no setuptools) reads it from this file
(``runpy.run_path``: ``setup()`` runs only when this file is the script, as under pip's build backend and
``python setup.py``).

``optional=True``: a machine without a C compiler still installs stepscope, which then records with its
pure-Python recorder (``stepscope.record.native`` says why the extension is unavailable). Everything else is in
pyproject.toml.

The hook (src/stepscope-follow.pth) goes to the top of the wheel, that is into site-packages, by a normal install and
by an editable one (``pip install -e .``): Python runs it at every start; it does nothing unless ``STEPSCOPE_FOLLOW``
is set (one ``in os.environ`` test), and under ``stepscope run`` makes each Python process of the program record
itself (``stepscope.record.processes.startup_hook``) without touching ``PYTHONPATH`` or ``sys.path``.
"""

import os
import sys

HOOK = "stepscope-follow.pth"
HOOK_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src", HOOK)
#: the extension's folder, relative to this file
NATIVE_DIR = "src/stepscope/record/native"
#: the device analysis's extension's folder (the Kineto trace scanner)
KSCAN_DIR = "src/stepscope/device/native"


def native_sources() -> dict:
    """The C extension's recipe as ``setuptools.Extension`` keyword arguments: ``name`` (the module's dotted name),
    ``sources`` (the .c files) and ``depends`` (the headers: a change rebuilds), paths relative to this file's
    folder; ``extra_compile_args`` (C11, -O2, symbols hidden but the module's init) and ``libraries``."""
    return {
        "name": "stepscope.record.native._native",
        "sources": [f"{NATIVE_DIR}/{n}.c" for n in ("module", "recorder", "monitor", "probes", "gen", "block",
                                                    "stackwalk", "threads", "sigtick", "looks", "outer", "remote",
                                                    "ownclock")],
        "depends": [f"{NATIVE_DIR}/{n}.h" for n in ("layout", "recorder", "monitor", "probes", "gen", "block",
                                                    "stackwalk", "threads", "walker", "sigtick", "looks", "outer", "remote",
                                                    "ownclock")],
        "extra_compile_args": ["-O2", "-std=c11", "-fvisibility=hidden"],
        "libraries": [] if sys.platform == "darwin" else ["pthread", "rt"],  # (rt: timer_create, glibc < 2.34)
    }


def kscan_sources() -> dict:
    """The Kineto trace scanner's recipe (``stepscope.device.native._kscan``), as ``native_sources()``'s."""
    return {
        "name": "stepscope.device.native._kscan",
        "sources": [f"{KSCAN_DIR}/{n}.c" for n in ("kscan", "jsonlex")],
        "depends": [f"{KSCAN_DIR}/{n}.h" for n in ("kscan", "jsonlex")],
        "extra_compile_args": ["-O2", "-std=c11", "-fvisibility=hidden"],
        "libraries": [],
    }


def native_extensions() -> list[dict]:
    """Every C extension's recipe: the recorder's (``native_sources``) and the trace scanner's (``kscan_sources``)."""
    return [native_sources(), kscan_sources()]


def main() -> None:
    """setuptools' ``setup()`` with the extension (optional) and the hook."""
    from setuptools import Extension, setup
    from setuptools.command.build_py import build_py

    class build_py_with_hook(build_py):
        """``build_py`` that also puts ``HOOK`` at the top of the built tree (a wheel's root: site-packages); in an
        editable build (setuptools' ``editable_wheel``, which makes the wheel of the install folder, not of
        ``build_lib``), there."""

        def run(self):
            super().run()
            self.copy_file(HOOK_SRC, os.path.join(self.build_lib, HOOK), preserve_mode=0)
            if getattr(self, "editable_mode", False):
                install = self.get_finalized_command("install")
                self.copy_file(HOOK_SRC, os.path.join(install.install_lib, HOOK), preserve_mode=0)

        def get_outputs(self, include_bytecode=1):
            return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, HOOK)]

    setup(ext_modules=[Extension(**r, optional=True) for r in native_extensions()],
          cmdclass={"build_py": build_py_with_hook})


if __name__ == "__main__":
    main()
