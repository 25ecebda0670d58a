#!/usr/bin/env bash
# Session 27's first device call, whatever card comes (results/experiments/session27/README.md).
# On an H200: the chapters' main job at HEAD without PyTorch (the goals), then as below.
# On any card: the [decode_matmul] and [bf16] kernel tests (the three new cases' first run),
# then, in what is left of CALL_LIMIT (570 s), the B = 64 A/B of rule_before_residency.patch with --step-timeline.
set -uo pipefail
out=${OUT:?}
limit=${CALL_LIMIT:-570}  # seconds this call may take (under the device's 600 and its budget)
gpu=$(nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader)
echo "GPU: $gpu" | tee "$out/gpu.txt"
if [[ "$gpu" == *H200* ]]; then
  mkdir -p "$out/main"
  OUT=$out/main LADDER_TIME_LIMIT=$(( limit < 320 ? limit : 320 )) LADDER_COMMIT=${LADDER_COMMIT:?} \
    bash scripts/gpu_check.sh ladder > "$out/main.txt" 2>&1
  tail -12 "$out/main.txt"
fi
if (( limit - SECONDS >= 120 )); then
  mkdir -p "$out/kernels"
  OUT=$out/kernels LADDER_GPU_TAGS="[decode_matmul] [bf16]" \
    LADDER_TIME_LIMIT=$(( limit - SECONDS < 150 ? limit - SECONDS : 150 )) \
    bash scripts/gpu_check.sh kernels > "$out/kernels.txt" 2>&1
  tail -8 "$out/kernels.txt"
fi
# the A/B gets what is left of the call
if (( limit - SECONDS >= 120 )); then
  mkdir -p "$out/ab"
  OUT=$out/ab LADDER_AB_ROUNDS=2 LADDER_AB_BATCHES="64" LADDER_AB_TIMELINE="64" \
    LADDER_AB_CHAPTERS="09_decode_matmuls:tf32 09_decode_matmuls" timeout $(( limit - SECONDS )) \
    bash scripts/ab_kernel.sh results/experiments/c_fc_by_residency/rule_before_residency.patch \
    > "$out/ab.txt" 2>&1
  echo "ab_kernel.sh rc $?"
  python3 scripts/ab_ratios.py "$out/ab/ab.tar.gz" > "$out/ratios.md"
  echo "ab_ratios.py rc $?"
  tail -50 "$out/ratios.md"
fi
# at most 8 files come back from a device call: everything in one archive, with the
# ratios and the printed outputs beside it
tar -czf /tmp/call1.tar.gz -C "$out" . &&
  find "$out" -mindepth 1 -maxdepth 1 ! -name ratios.md ! -name '*.txt' -exec rm -rf {} + &&
  mv /tmp/call1.tar.gz "$out/"
ls -la "$out"
