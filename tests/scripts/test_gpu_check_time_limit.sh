#!/usr/bin/env bash
# tests/scripts/test_gpu_check_time_limit.sh - scripts/gpu_check.sh under its time limit
# cuts a stage that runs past the limit, starts none after it, and still packs what the cut
# stage had finished.
#
#   bash tests/scripts/test_gpu_check_time_limit.sh
#
# Runs `gpu_check.sh pytorch profile` on any machine with stand-ins: nvidia-smi, cmake, and a python3
# that writes one variant's file into --out, then sleeps a minute (a PyTorch baseline cut by
# the limit, whose finished variants must not be lost with it). Checked: with a limit of
# 6 s and no reserve the run ends within 20 s, exits 0, its summary reports
# the pytorch stage failed and names the limit, the profile stage never started its script,
# and $OUT/ladder.tar.gz holds the finished variant's file; without the limit (the stand-in
# sleeping 1 s) the summary does not mention it.
set -euo pipefail
# shellcheck source=tests/scripts/stand_ins.sh
source "$(dirname "$0")/stand_ins.sh"

stand_in_nvidia_smi
printf '#!/bin/sh\nexit 0\n' > "$work/bin/cmake"  # the profile stage builds first
cat > "$work/bin/python3" << 'EOF_PYTHON'
#!/usr/bin/env bash
# python3 scripts/pytorch_baseline.py --out DIR ...: one variant written, then a long run.
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
echo '{"variant": "stand-in"}' > "$out/pytorch_stand_in.fp32.json"
sleep "$SLEEP"
EOF_PYTHON
chmod +x "$work/bin/"*

# The profile stage would run scripts/profile_kernels.sh: a copy of the tree whose
# profile script only leaves a mark says whether it started.
tree=$work/tree
mkdir -p "$tree/scripts"
cp "$repository/scripts/gpu_check.sh" "$tree/scripts/"
printf '#!/usr/bin/env bash\ntouch "%s/profile_started"\n' "$work" > "$tree/scripts/profile_kernels.sh"

start=$(date +%s)
status=0
env PATH="$work/bin:$PATH" OUT="$work/out" SLEEP=60 LADDER_TIME_LIMIT=6 LADDER_TIME_RESERVE=0 \
  bash "$tree/scripts/gpu_check.sh" pytorch profile > "$work/output.txt" 2>&1 || status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" -eq 0 ] || fail "gpu_check.sh exited with $status"
[ "$elapsed" -le 20 ] || fail "the call took $elapsed s under a 6 s limit"
grep -q 'pytorch: FAILED' "$work/out/summary.txt" || fail "the summary does not report the cut stage"
grep -q 'LADDER_TIME_LIMIT=6 s reached' "$work/out/summary.txt" || fail "the summary does not name the limit"
[ ! -e "$work/profile_started" ] || fail "the profile stage started after the limit"
if [ -f "$work/out/ladder.tar.gz" ]; then
  tar -tzf "$work/out/ladder.tar.gz" | grep 'ladder/pytorch_stand_in.fp32.json' > /dev/null ||
    fail "ladder.tar.gz lacks the finished variant: $(tar -tzf "$work/out/ladder.tar.gz")"
else
  fail "no ladder.tar.gz: what finished was not packed"
fi

rm -rf "$work/out"
env PATH="$work/bin:$PATH" OUT="$work/out" SLEEP=1 \
  bash "$tree/scripts/gpu_check.sh" pytorch > "$work/output.txt" 2>&1 ||
  fail "gpu_check.sh without a limit exited with $?"
grep -q 'pytorch: 1 variant files' "$work/out/summary.txt" ||
  fail "without a limit the stand-in's variant is not counted: $(cat "$work/out/summary.txt")"
! grep -q 'LADDER_TIME_LIMIT' "$work/out/summary.txt" || fail "no limit set, yet the summary names one"

if [ "$failures" -gt 0 ]; then
  echo "--- the last call's output:"; cat "$work/output.txt"
  exit 1
fi
echo "gpu_check.sh under LADDER_TIME_LIMIT: the cut stage reported, later stages not started, the finished variant packed"
