#!/usr/bin/env bash
# tests/scripts/test_run_ladder_keeps_results.sh - the main job never destroys results.
#
#   bash tests/scripts/test_run_ladder_keeps_results.sh PRESET
#
# Runs scripts/run_ladder.sh twice on a copy of results/latest, on any machine, and
# checks that the copy is exactly as it was and that no partial folder is left beside it:
#   1. nvidia-smi lists no GPU (a stand-in nvidia-smi that fails): the job must stop
#      before it builds or writes anything, with exit code 3;
#   2. nvidia-smi lists a GPU, but the chapters see none (CUDA_VISIBLE_DEVICES=-1): the
#      job builds PRESET's chapters (already built: CTest runs after the build), the
#      first chapter stops it with exit code 3, half-way through a run.
set -euo pipefail
preset=${1:?usage: test_run_ladder_keeps_results.sh PRESET}
repository=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/results"
cp -a "$repository/results/latest" "$work/results/latest"
failures=0

check_run() {  # what, answer of the stand-in nvidia-smi (0: a GPU, 1: none)
  local what=$1 answer=$2 status=0
  printf '#!/bin/sh\nexit %s\n' "$answer" > "$work/bin/nvidia-smi"
  chmod +x "$work/bin/nvidia-smi"
  PATH="$work/bin:$PATH" CUDA_VISIBLE_DEVICES=-1 LADDER_PRESET=$preset \
    bash "$repository/scripts/run_ladder.sh" "$work/results/latest" --no-pytorch \
    > "$work/output.txt" 2>&1 || status=$?
  if [ $status -ne 3 ]; then
    echo "FAILED ($what): exit code $status, expected 3 (no CUDA device); the job printed:"
    cat "$work/output.txt"
    failures=$((failures + 1))
  fi
  if ! diff -r "$repository/results/latest" "$work/results/latest" > "$work/diff.txt"; then
    echo "FAILED ($what): the results changed:"
    cat "$work/diff.txt"
    failures=$((failures + 1))
  fi
  if [ "$(ls "$work/results")" != latest ]; then
    echo "FAILED ($what): left beside the results: $(ls "$work/results" | tr '\n' ' ')"
    failures=$((failures + 1))
  fi
  echo "$what: exit code $status; last line: $(tail -1 "$work/output.txt")"
}

check_run "no GPU listed" 1
if ! grep -q "nothing was built or run" "$work/output.txt"; then
  echo "FAILED (no GPU listed): the job did not stop before building"
  failures=$((failures + 1))
fi
check_run "a GPU listed, none usable" 0
[ $failures -eq 0 ] && echo "run_ladder.sh left the results as they were, twice"
exit $((failures > 0))
