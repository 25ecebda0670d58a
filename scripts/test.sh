#!/usr/bin/env bash
# scripts/test.sh - THE test command: builds everything and runs every test.
#
#   bash scripts/test.sh
#
# Without a GPU the CPU tests run and every GPU test is reported by CTest as
# "Not Run (Skipped)" with the reason; with a GPU everything runs. The preset is
# "ci" (sm_90, compiles fastest) on machines without a GPU and "native" (the GPU
# in this machine) otherwise; LADDER_PRESET overrides it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_dependencies.sh

if [ -z "${LADDER_PRESET:-}" ]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    LADDER_PRESET=native
  else
    LADDER_PRESET=ci
  fi
fi
extra_configure=()
if [ -n "${LADDER_DEPS_PREFIX:-}" ]; then
  extra_configure+=("-DCMAKE_PREFIX_PATH=$LADDER_DEPS_PREFIX")
fi

cmake --preset "$LADDER_PRESET" "${extra_configure[@]}"
cmake --build --preset "$LADDER_PRESET" -j "$(nproc)"
ctest --preset "$LADDER_PRESET" -j 1 "$@"
