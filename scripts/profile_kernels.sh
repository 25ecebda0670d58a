#!/usr/bin/env bash
# scripts/profile_kernels.sh - Nsight Compute on one decode step of every chapter (GPU).
#
#   bash scripts/profile_kernels.sh [BUILD_DIR]     (default build/native)
#
# For each chapter executable in BUILD_DIR/chapters: one timed run of the default
# workload (B = 32, 100 new tokens, BOS prompt), and inside it (NVTX range "timed run")
# the kernels of one step halfway through the run (skipping 50 steps' worth of
# launches, counting one step's: kernels_per_step from results/latest/NN_name.json).
# Per kernel it keeps: launches in that step, GPU time, DRAM bytes read and written,
# achieved occupancy; results/ncu/NN_name.csv, which scripts/kernel_report.py merges
# into docs/kernels.md (commit both). Kernel replay: each kernel runs several times
# under ncu, so the run is slower than a timed one; expect a minute or two per chapter.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build/native}
command -v ncu >/dev/null || { echo "error: ncu (Nsight Compute) not on PATH" >&2; exit 1; }
[ -d "$build/chapters" ] || { echo "error: $build/chapters not found: build first" >&2; exit 1; }

metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p results/ncu

for executable in "$build"/chapters/[0-9][0-9]_*; do
  [ -x "$executable" ] || continue
  chapter=$(basename "$executable")
  json=results/latest/$chapter.json
  if [ ! -f "$json" ]; then
    echo "skipping $chapter: no $json (its kernels per step) committed" >&2
    continue
  fi
  per_step=$(python3 -c "
import json, sys
rows = json.load(open(sys.argv[1]))['configurations']
row = next(r for r in rows if r['batch'] == 32 and r['new_tokens'] == 100)
print(max(1, round(row['kernels_per_step'])))" "$json")
  echo "$chapter: profiling $per_step launches, one step halfway through the run" >&2
  ncu --nvtx --nvtx-include "timed run/" --launch-skip $((per_step * 50)) \
      --launch-count "$per_step" --metrics "$metrics" --force-overwrite \
      --export "$scratch/$chapter" \
      "$executable" --batch 32 --new-tokens 100 --runs 1 --warmup 1 --quiet >/dev/null
  ncu --import "$scratch/$chapter.ncu-rep" --csv --page raw --print-units base \
      > "$scratch/$chapter.raw.csv"
  python3 scripts/kernel_report.py --import-ncu "$scratch/$chapter.raw.csv" \
      --chapter "$chapter"
done
echo "now: python3 scripts/kernel_report.py --build $build, and commit results/ncu and docs/kernels.md" >&2
