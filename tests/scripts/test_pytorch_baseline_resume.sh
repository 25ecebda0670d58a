#!/usr/bin/env bash
# tests/scripts/test_pytorch_baseline_resume.sh - scripts/pytorch_baseline.py --resume keeps
# the variant files an earlier run finished and runs the others.
#
#   bash tests/scripts/test_pytorch_baseline_resume.sh
#
# Needs no torch and no GPU: a stand-in `torch` package first on PYTHONPATH fails to import,
# so every worker the parent starts stops at once (exit 4), after the parent has chosen what
# to run. In --out: naive finished, dynamic whose process died (complete, with an error),
# static cut by a limit ("complete": false). Checked: naive's file is kept as it was and
# named kept; dynamic and static are started; without --resume naive is started too.
set -euo pipefail
# shellcheck source=tests/scripts/stand_ins.sh
source "$(dirname "$0")/stand_ins.sh"

mkdir -p "$work/python/torch"
echo 'raise ImportError("stand-in: no torch here")' > "$work/python/torch/__init__.py"
out=$work/results
fill() {
  mkdir -p "$out"
  echo '{"complete": true, "error": null, "mark": "earlier"}' > "$out/pytorch_naive.fp32.json"
  echo '{"complete": true, "error": "the process running it exited with code 1"}' \
    > "$out/pytorch_dynamic_cache.fp32.json"
  echo '{"complete": false, "error": null}' > "$out/pytorch_static_cache.fp32.json"
}
baseline() {  # baseline [--resume]: the three variants in fp32, its stderr in $work/log
  local status=0
  PYTHONPATH="$work/python" python3 "$repository/scripts/pytorch_baseline.py" "$@" \
    --precision fp32 --variants naive,dynamic,static --out "$out" 2> "$work/log" || status=$?
  [ "$status" -eq 4 ] || fail "pytorch_baseline.py $* exited with $status, not 4 (no torch)"
}

fill
baseline --resume
grep -q 'fp32: naive kept' "$work/log" || fail "--resume did not keep the finished variant"
grep -q 'fp32: dynamic, static$' "$work/log" ||
  fail "--resume did not start exactly the died and the cut variants"
grep -q '"mark": "earlier"' "$out/pytorch_naive.fp32.json" ||
  fail "--resume did not leave the finished variant's file as it was"

rm -rf "$out"
fill
baseline
grep -q 'fp32: naive, dynamic, static$' "$work/log" || fail "without --resume not every variant started"

if [ "$failures" -gt 0 ]; then
  echo "--- the last run's stderr:"; cat "$work/log"
  exit 1
fi
echo "pytorch_baseline.py --resume: the finished variant kept, the died and the cut ones run again"
