#!/usr/bin/env bash
# scripts/test.sh - THE test command: builds everything and runs every test.
#
#   bash scripts/test.sh
#
# Without a GPU (no NVIDIA GPU or no driver) the CPU tests run and CTest marks every
# GPU test "***Skipped" and lists it under "The following tests did not run"; the
# last line then says how many were skipped and why. A GPU that is there but fails
# fails the GPU tests. With a GPU everything runs. The preset is "ci" (sm_90,
# compiles fastest) on machines without a GPU and "native" (the GPU in this
# machine) otherwise; LADDER_PRESET overrides it. Arguments go to ctest (e.g. -R cli).
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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
ctest --preset "$LADDER_PRESET" -j 1 "$@" 2>&1 | tee "$log" || status=$?

# CTest names each skipped test but never says why: the GPU tests' main does, once.
gpu_skipped=$(grep -cE '^[[:space:]]*[0-9]+ - gpu: ?.*\(Skipped\)$' "$log" || true)
other_skipped=$(grep -E '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$log" | grep -vE ' - gpu: ?' || true)
if [ "$gpu_skipped" -gt 0 ]; then
  reason=$("build/$LADDER_PRESET/tests/gpu_tests" 2>&1 | head -1 || true)
  echo "test.sh: $gpu_skipped GPU tests skipped: ${reason#SKIPPED: }"
fi
if [ -n "$other_skipped" ]; then
  # Tests that wait for data made elsewhere (the bf16 golden data needs torch): each
  # prints its reason in the log above; name them here so they are not missed.
  echo "test.sh: also skipped (their reason is in the log above):"
  echo "$other_skipped" | sed -E 's/^[[:space:]]*[0-9]+ - /  /'
fi
exit "$status"
