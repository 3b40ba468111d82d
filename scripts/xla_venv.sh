#!/usr/bin/env bash
# Build, once, the PyTorch/XLA virtualenv the XLA tests run in (issue 17), cached OUTSIDE the clone:
#   ${STEPSCOPE_XLA_VENV:-${XDG_CACHE_HOME:-~/.cache}/stepscope/xla-venv-<torch-xla version>}
# It holds torch==$XLA_VERSION and torch-xla==$XLA_VERSION from the registry (the CUDA build of torch, ~7 GB,
# ~10 minutes the first time: nearly all of it download), plus stepscope's own dependencies and the
# diffusers/transformers/accelerate set. stepscope itself is NOT installed: the tests put the clone's src/ on
# PYTHONPATH, so one cached venv serves every clone. The venv runs on the CPU with PJRT_DEVICE=CPU.
#
# The base (torch + torch-xla) is stamped in $VENV/.stepscope-base; a venv without the stamp (missing or an
# interrupted build) is removed and rebuilt. The dependency set is stamped with a hash of pyproject.toml's lists
# in $VENV/.stepscope-deps and re-installed (cheap) when they change.
#
# Prints the venv's python on the last line of stdout. Exit status: 0 ready; 3 the registry cannot be reached
# (the caller may skip, saying so); anything else, a failed build.
set -euo pipefail
XLA_VERSION="${STEPSCOPE_XLA_VERSION:-2.9.0}"
PY="${STEPSCOPE_XLA_PYTHON:-python3.11}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/stepscope"
VENV="${STEPSCOPE_XLA_VENV:-$CACHE/xla-venv-$XLA_VERSION}"
BASE_STAMP="$VENV/.stepscope-base"
DEPS_STAMP="$VENV/.stepscope-deps"
log() { echo "xla-venv: $*" >&2; }

registry_unreachable() {
  # pip's own client, one query for the one package we need.
  ! "$PY" -m pip index versions "torch-xla" >/dev/null 2>&1
}

if ! command -v "$PY" >/dev/null 2>&1; then
  PY=python3
fi

if [ ! -f "$BASE_STAMP" ] || [ "$(cat "$BASE_STAMP")" != "torch==$XLA_VERSION torch-xla==$XLA_VERSION" ]; then
  start=$(date +%s)
  log "building $VENV (torch==$XLA_VERSION, torch-xla==$XLA_VERSION; the first build downloads ~7 GB)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -q \
        "torch==$XLA_VERSION" "torch-xla==$XLA_VERSION" >&2; then
    if registry_unreachable; then
      log "the package registry cannot be reached: torch-xla==$XLA_VERSION cannot be installed"
      rm -rf "$VENV"
      exit 3
    fi
    log "pip failed installing torch/torch-xla"
    exit 1
  fi
  echo "torch==$XLA_VERSION torch-xla==$XLA_VERSION" > "$BASE_STAMP"
  log "base installed in $(( $(date +%s) - start )) s"
fi

# stepscope's dependencies (not stepscope itself), the sd extra and the test runner, from pyproject.toml.
DEPS="$("$VENV/bin/python" - "$HERE/pyproject.toml" <<'PYEOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    p = tomllib.load(f)["project"]
deps = list(p["dependencies"]) + list(p["optional-dependencies"]["sd"]) + ["pytest>=8", "pytest-timeout>=2.3"]
print("\n".join(deps))
PYEOF
)"
WANT="$(printf '%s\n' "$DEPS" | sha256sum | cut -c1-16)"
if [ ! -f "$DEPS_STAMP" ] || [ "$(cat "$DEPS_STAMP")" != "$WANT" ]; then
  start=$(date +%s)
  log "installing stepscope's dependencies and diffusers/transformers/accelerate"
  # torch stays at the XLA build: the constraint keeps pip from moving it.
  printf 'torch==%s\ntorch-xla==%s\n' "$XLA_VERSION" "$XLA_VERSION" > "$VENV/.stepscope-constraints"
  # shellcheck disable=SC2086
  if ! printf '%s\n' "$DEPS" | xargs -d '\n' "$VENV/bin/python" -m pip install --disable-pip-version-check -q \
        -c "$VENV/.stepscope-constraints" >&2; then
    if registry_unreachable; then
      log "the package registry cannot be reached: dependencies cannot be installed"
      exit 3
    fi
    log "pip failed installing the dependencies"
    exit 1
  fi
  echo "$WANT" > "$DEPS_STAMP"
  log "dependencies installed in $(( $(date +%s) - start )) s"
fi
echo "$VENV/bin/python"
