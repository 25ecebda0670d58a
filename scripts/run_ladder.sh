#!/usr/bin/env bash
# scripts/run_ladder.sh - THE main job: builds every chapter and runs the whole ladder.
#
#   bash scripts/run_ladder.sh [chapter flags...]
#
# Builds (preset "native": the GPU in this machine; LADDER_PRESET overrides it), then
# runs every chapter that exists, in ladder order, on the SPEC's default workload
# (B = 32; N = 100, 200, 400) and prints their tables one after the other. Flags are
# passed to every chapter (e.g. --new-tokens 100 --runs 3). Without a GPU the first
# chapter says "no CUDA device found" and the job stops there.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_dependencies.sh
preset=${LADDER_PRESET:-native}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  preset=${LADDER_PRESET:-ci}  # "native" needs a GPU to detect; the chapters will say there is none
fi
extra_configure=()
[ -n "${LADDER_DEPS_PREFIX:-}" ] && extra_configure+=("-DCMAKE_PREFIX_PATH=$LADDER_DEPS_PREFIX")
cmake --preset "$preset" "${extra_configure[@]}" >/dev/null
cmake --build --preset "$preset" --target chapters -j "$(nproc)"

results=build/$preset/results
mkdir -p "$results"
for chapter in build/"$preset"/chapters/[0-9][0-9]_*; do
  name=$(basename "$chapter")
  echo
  echo "=== $name"
  "$chapter" --json "$results/$name.json" "$@"
done
echo
echo "JSON results: $results/"
