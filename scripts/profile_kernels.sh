#!/usr/bin/env bash
# scripts/profile_kernels.sh - Nsight Compute on one decode step of every chapter (GPU).
#
#   bash scripts/profile_kernels.sh [BUILD_DIR]     (default build/native)
#
# Kernels per step come from results/latest/NN_name.json, or from the folder
# LADDER_PROFILE_RESULTS names (a run not yet committed). LADDER_PROFILE_CHAPTERS="09 10"
# profiles those chapters only.
#
# For each chapter executable in BUILD_DIR/chapters: one timed run of the default
# workload (B = 32, 100 new tokens, BOS prompt), and inside it (NVTX range "timed run")
# the kernels of one step halfway through the run (skipping 50 steps' worth of
# launches, counting one step's: kernels_per_step from results/latest/NN_name.json).
# Per kernel it keeps: launches in that step, GPU time, DRAM bytes read and written,
# achieved occupancy; results/ncu/NN_name.csv, which scripts/kernel_report.py merges
# into docs/kernels.md (commit both). Kernel replay: each kernel runs several times
# under ncu, so the run is slower than a timed one; expect a minute or two per chapter.
#
# Chapters that run the whole generation as one graph with a WHILE node (08 on) launch no
# kernel of their own in the timed run, and ncu does not profile the kernels of a
# conditional node's body one by one. For them the profiled step is the prefill their first
# generation runs plainly before it captures (NVTX range "warm-up run/prefill", which holds
# every launch of that step but its argmax): with the default one-token prompt, the step's
# products on the decode step's shapes (B = 32 rows); the attention and the cache writes
# are the prefill's kernels.
# Chapter 11 runs every decode step in one launch of its persistent kernel: that launch is
# profiled whole, with the warp states beside (results/ncu/11_persistent_kernel.stalls.csv).
# A chapter that fails under ncu is reported and skipped; the exit status says whether any did.
set -uo pipefail
cd "$(dirname "$0")/.."

build=${1:-build/native}
command -v ncu >/dev/null || { echo "error: ncu (Nsight Compute) not on PATH" >&2; exit 1; }
[ -d "$build/chapters" ] || { echo "error: $build/chapters not found: build first" >&2; exit 1; }

metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p results/ncu

failed=0
for executable in "$build"/chapters/[0-9][0-9]_*; do
  [ -x "$executable" ] || continue
  chapter=$(basename "$executable")
  [ -n "${LADDER_PROFILE_CHAPTERS:-}" ] &&
    ! echo " $LADDER_PROFILE_CHAPTERS " | grep -q " ${chapter%%_*} " && continue
  json=${LADDER_PROFILE_RESULTS:-results/latest}/$chapter.json
  if [ ! -f "$json" ]; then
    echo "skipping $chapter: no $json (its kernels per step) committed" >&2
    continue
  fi
  # kernels per step, and whether the timed run is one graph launch per generation
  read -r per_step one_graph < <(python3 -c "
import json, sys
rows = json.load(open(sys.argv[1]))['configurations']
row = next(r for r in rows if r['batch'] == 32 and r['new_tokens'] == 100)
graphs = (row.get('graph_launches_per_step') or 0) * row['steps']
print(max(1, round(row['kernels_per_step'])), int(round(graphs) == 1))" "$json")
  range="timed run/"
  skip=$((per_step * 50))
  count=$per_step
  where="$per_step launches, one step halfway through the run"
  if [ "$one_graph" = 1 ]; then
    range="warm-up run/prefill/"
    skip=0
    count=100000  # every launch in the range
    where="the first generation's plain prefill (one-token prompt: B = 32 rows; not its argmax)"
  fi
  chapter_metrics=$metrics
  kernels=()
  if [ "$chapter" = 11_persistent_kernel ]; then
    # One launch runs every decode step of the generation: that launch is profiled whole
    # (its DRAM bytes over its time, its occupancy), with the warp states (how many warps
    # wait for what per issued instruction: the counters' spins, barriers, loads), which
    # kernel_report.py keeps in results/ncu/11_persistent_kernel.stalls.csv.
    range="timed run/"
    skip=0
    count=1
    kernels=(--kernel-name regex:persistent_decode)
    chapter_metrics+=",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
    where="the persistent kernel's launch, every decode step of one generation"
  fi
  echo "$chapter: profiling $where" >&2
  if ! ncu --nvtx --nvtx-include "$range" "${kernels[@]}" --launch-skip "$skip" \
      --launch-count "$count" --metrics "$chapter_metrics" --force-overwrite \
      --export "$scratch/$chapter" \
      "$executable" --batch 32 --new-tokens 100 --runs 1 --warmup 1 --quiet \
      > "$scratch/$chapter.ncu.log" 2>&1 ||
     ! ncu --import "$scratch/$chapter.ncu-rep" --csv --page raw --print-units base \
      > "$scratch/$chapter.raw.csv" 2>>"$scratch/$chapter.ncu.log" ||
     ! python3 scripts/kernel_report.py --import-ncu "$scratch/$chapter.raw.csv" \
      --chapter "$chapter" 2>>"$scratch/$chapter.ncu.log"; then
    echo "$chapter: ncu FAILED; its log:" >&2
    grep -v '^==PROF== Profiling' "$scratch/$chapter.ncu.log" | tail -15 >&2
    failed=1
  fi
done
# The run these profiles stand beside: kernel_report.py sets ncu's bandwidths against its
# copy bandwidth (the same GPU when the profile runs in the main job's call).
cp "${LADDER_PROFILE_RESULTS:-results/latest}/run.json" results/ncu/run.json 2>/dev/null ||
  echo "note: no run.json beside the chapters' results to copy into results/ncu" >&2
echo "now: python3 scripts/kernel_report.py --build $build, and commit results/ncu and docs/kernels.md" >&2
exit "$failed"
