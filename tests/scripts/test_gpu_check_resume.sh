#!/usr/bin/env bash
# tests/scripts/test_gpu_check_resume.sh - scripts/gpu_check.sh with LADDER_MAIN_JOB_DIR
# gathers the main job across calls: the same command run again skips the chapters' run
# once it is there and asks the PyTorch baseline to keep what it finished (--resume).
#
#   bash tests/scripts/test_gpu_check_resume.sh
#
# Runs `gpu_check.sh ladder pytorch` three times on any machine with stand-ins: nvidia-smi,
# cmake, a run_ladder.sh that writes run.json and leaves a mark, and a python3 that records
# its arguments and writes variant files (the first call: one finished, one cut, as a time
# limit leaves them; the second: the cut one finished). Checked: the first call runs the
# chapters and packs run.json and both files, its summary counting one not finished; the
# second does not run the chapters again, passes --resume, and packs run.json and both
# files finished; a call with another LADDER_COMMIT than the folder's run.json starts afresh,
# the next with the same keeps it; a call without LADDER_MAIN_JOB_DIR runs the chapters and
# passes no --resume.
set -euo pipefail
# shellcheck source=tests/scripts/stand_ins.sh
source "$(dirname "$0")/stand_ins.sh"

stand_in_nvidia_smi
printf '#!/bin/sh\nexit 0\n' > "$work/bin/cmake"
cat > "$work/bin/python3" << 'EOF_PYTHON'
#!/usr/bin/env bash
# python3 scripts/pytorch_baseline.py --out DIR ...: arguments recorded, files per $CALL.
echo "$*" > "$WORK/pytorch_args.$CALL"
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
echo '{"complete": true, "error": null}' > "$out/pytorch_a.fp32.json"
if [ "$CALL" = 1 ]; then
  echo '{"complete": false, "error": null}' > "$out/pytorch_b.fp32.json"
else
  echo '{"complete": true, "error": null}' > "$out/pytorch_b.fp32.json"
fi
EOF_PYTHON
chmod +x "$work/bin/"*

tree=$work/tree
mkdir -p "$tree/scripts"
cp "$repository/scripts/gpu_check.sh" "$tree/scripts/"
cat > "$tree/scripts/run_ladder.sh" << 'EOF_LADDER'
#!/usr/bin/env bash
# run_ladder.sh RESULTS_DIR --no-pytorch: the chapters' run, as a mark and a run.json.
touch "$WORK/ladder_started.$CALL"
echo "{\"gpu\": \"stand-in GPU\", \"git_commit\": \"${LADDER_COMMIT:-unknown}\"}" > "$1/run.json"
EOF_LADDER

call() {  # call N [VAR=VALUE ...]: gpu_check.sh ladder pytorch as call N
  local number=$1; shift
  env PATH="$work/bin:$PATH" WORK="$work" CALL="$number" OUT="$work/out$number" "$@" \
    bash "$tree/scripts/gpu_check.sh" ladder pytorch > "$work/output.$number.txt" 2>&1 ||
    fail "call $number exited with $?"
}
packed() {  # packed N FILE: whether call N's ladder.tar.gz holds ladder/FILE
  # grep reads the whole listing (no -q): a grep that quits at its first match can leave
  # tar writing into a closed pipe, and pipefail turns that SIGPIPE into "not packed".
  tar -tzf "$work/out$1/ladder.tar.gz" 2> /dev/null | grep -x "ladder/$2" > /dev/null
}

call 1 LADDER_MAIN_JOB_DIR="$work/job"
[ -e "$work/ladder_started.1" ] || fail "call 1 did not run the chapters"
for file in run.json pytorch_a.fp32.json pytorch_b.fp32.json; do
  packed 1 "$file" || fail "call 1's ladder.tar.gz lacks $file"
done
grep -q '1 not finished' "$work/out1/summary.txt" ||
  fail "call 1's summary does not count the cut variant: $(cat "$work/out1/summary.txt")"

call 2 LADDER_MAIN_JOB_DIR="$work/job"
[ ! -e "$work/ladder_started.2" ] || fail "call 2 ran the chapters again"
grep -q 'ladder: kept from an earlier call' "$work/out2/summary.txt" ||
  fail "call 2's summary does not say the chapters' run was kept"
grep -q -- '--resume' "$work/pytorch_args.2" || fail "call 2 did not pass --resume: $(cat "$work/pytorch_args.2")"
for file in run.json pytorch_a.fp32.json pytorch_b.fp32.json; do
  packed 2 "$file" || fail "call 2's ladder.tar.gz lacks $file"
done
grep -q '0 not finished' "$work/out2/summary.txt" ||
  fail "call 2's summary does not say every variant finished: $(cat "$work/out2/summary.txt")"

call 4 LADDER_MAIN_JOB_DIR="$work/job" LADDER_COMMIT=other
[ -e "$work/ladder_started.4" ] || fail "a folder of another commit's run was kept"
grep -q 'held another commit' "$work/out4/summary.txt" || fail "call 4 does not say why it started afresh"
call 5 LADDER_MAIN_JOB_DIR="$work/job" LADDER_COMMIT=other
[ ! -e "$work/ladder_started.5" ] || fail "the same commit's run was not kept"

call 3
[ -e "$work/ladder_started.3" ] || fail "without LADDER_MAIN_JOB_DIR the chapters did not run"
! grep -q -- '--resume' "$work/pytorch_args.3" || fail "without LADDER_MAIN_JOB_DIR --resume was passed"
packed 3 run.json || fail "call 3's ladder.tar.gz lacks run.json"

if [ "$failures" -gt 0 ]; then
  for number in 1 2 4 5 3; do echo "--- call $number's output:"; cat "$work/output.$number.txt" 2> /dev/null; done
  exit 1
fi
echo "gpu_check.sh with LADDER_MAIN_JOB_DIR: the chapters' run kept, the PyTorch rows resumed, all packed each call"
