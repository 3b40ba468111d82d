# Two entry points for a fresh machine with nothing but Python 3.11: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: interp-venvs install demo test test-xla test-lab test-apps xla-venv bench clean gpu-wheels gpu-check native wheels

$(STAMP): pyproject.toml requirements-dev.txt Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	# k-diffusion's samplers for the step-loop tests, without its training extras (torchvision, wandb, clean-fid:
	# the registry's torchvision for this torch is a CUDA build that would replace it)
	$(BIN)/python -m pip install --disable-pip-version-check -q --no-deps "k-diffusion==0.1.1.post1" \
		"torchsde>=0.2.6" "torchdiffeq>=0.2.5" "trampoline>=0.1.2"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/stepscope demo

# Python 3.12 and 3.13 (pyenv's, where installed) get a virtualenv each with pytest, so that the suite's tests that run
# under every supported interpreter (tests/test_transparency.py's INTERPRETERS) never skip one for want of pytest
PYENV_PYS := $(HOME)/.pyenv/versions/3.12.1/bin/python3.12 $(HOME)/.pyenv/versions/3.13.0/bin/python3.13
interp-venvs:
	@for py in $(PYENV_PYS); do if [ -x "$$py" ]; then \
		v=$$($$py -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
		[ -x .venv-$$v/bin/python ] || { $$py -m venv .venv-$$v && .venv-$$v/bin/python -m pip install -q \
			--disable-pip-version-check "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100"; } || rm -rf .venv-$$v; \
	fi; done

# Two workers (pytest-xdist), a test file each at a time (module fixtures are made once); TEST_WORKERS=0 runs them in
# this process, one after another
TEST_WORKERS ?= 2
test: $(STAMP) interp-venvs native
	$(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The C extensions (the recorder, stepscope.record.native._native, issue 31; the Kineto trace scanner,
# stepscope.device.native._kscan, issue 42): `pip install -e .` builds them in place for the venv's Python; `native`
# also builds them for pyenv's 3.12/3.13 that the tests run with PYTHONPATH=src (tests/test_transparency.py does it
# too), from setup.py's recipes (native_extensions). A machine without a C compiler: the pure-Python recorder and the
# msgspec trace reader, nothing fails.
native:
	-@for py in $(PY) $$HOME/.pyenv/versions/3.12.1/bin/python3.12 $$HOME/.pyenv/versions/3.13.0/bin/python3.13; do \
		[ -x "$$(command -v $$py)" ] && $$py scripts/build_native.py; done

# manylinux wheels for CPython 3.11-3.13 (this machine's architecture) into wheelhouse/, with
# cibuildwheel (needs docker; not run in CI). Settings: [tool.cibuildwheel] in pyproject.toml.
wheels:
	$(PY) -m pip install -q "cibuildwheel>=2.21"
	$(PY) -m cibuildwheel --platform linux --output-dir wheelhouse

# PyTorch/XLA (issue 17): torch + torch-xla in a virtualenv cached outside the clone (built once, ~7 GB;
# scripts/xla_venv.sh), then tests_xla/ on the CPU (PJRT_DEVICE=CPU). Skipped, saying so, when the package
# registry cannot be reached.
xla-venv:
	scripts/xla_venv.sh

test-xla:
	scripts/test_xla.sh

# The example notebook on a real kernel, and JupyterLab started by the test with a notebook of %%stepscope cells
# opened in headless Chromium (issue 40): the inline
# report drawn and clickable; screenshots in $$STEPSCOPE_SCREENSHOTS. About a minute.
test-lab: $(STAMP)
	$(BIN)/python -m pytest -q tests_lab

# Whole real apps (tests/apps): the ComfyUI server under --app comfyui (about 2 minutes on 2 cores). Needs
# COMFYUI_DIR (a checkout of Comfy-Org/ComfyUI) and COMFYUI_PYTHON (a Python with its requirements and stepscope's);
# skipped, saying so, without them.
test-apps: $(STAMP)
	$(BIN)/python -m pytest -q -ra tests/apps

# The GPU check (issue 16; docs/device.md: GPU check). gpu-wheels runs here, with the package registry: the wheels that
# gpu-check installs with no index on a GPU machine (never torch: it uses the machine's). gpu-check: one line and
# exit 2 without CUDA; otherwise .gpu-venv (system site-packages) and the checks' one table ($OUT: JSON + markdown).
GPU_WHEELS_SKIP ?=
GPU_CHECK_ARGS ?=
gpu-wheels: $(STAMP)
	$(BIN)/python scripts/gpu_wheels.py --skip "$(GPU_WHEELS_SKIP)"

gpu-check:
	@$(PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/tracer_overhead.py
	$(BIN)/python benchmarks/compile_transparency.py
	$(BIN)/python benchmarks/run_overhead.py --model tiny
	$(BIN)/python benchmarks/analysis_speed.py
	$(BIN)/python benchmarks/serve_load.py
	$(BIN)/python benchmarks/ui_page_load.py
	$(BIN)/python benchmarks/cli_startup.py

clean:
	rm -rf $(VENV) .venv-3.12 .venv-3.13 .gpu-venv .stepscope stepscope-*.html wheelhouse build src/stepscope/record/native/_native*.so
