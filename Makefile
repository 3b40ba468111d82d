# Two entry points for a fresh machine with nothing but Python 3.11: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-xla xla-venv bench clean gpu-wheels gpu-check

$(STAMP): pyproject.toml requirements-dev.txt
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/stepscope demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# PyTorch/XLA (issue 17): torch + torch-xla in a virtualenv cached outside the clone (built once, ~7 GB;
# scripts/xla_venv.sh), then tests_xla/ on the CPU (PJRT_DEVICE=CPU). Skipped, saying so, when the package
# registry cannot be reached.
xla-venv:
	scripts/xla_venv.sh

test-xla:
	scripts/test_xla.sh

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

clean:
	rm -rf $(VENV) .gpu-venv .stepscope stepscope-*.html
