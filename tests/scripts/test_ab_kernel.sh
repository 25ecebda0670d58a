#!/usr/bin/env bash
# tests/scripts/test_ab_kernel.sh - scripts/ab_kernel.sh builds each variant from its own
# copy of the tree, runs them in turn, reads its summary from their outputs, and refuses
# bad patches before it builds anything.
#
#   bash tests/scripts/test_ab_kernel.sh
#
# Runs on any machine, with stand-ins for nvidia-smi and cmake. The stand-in cmake "builds"
# two programs into the copy's build/native: a decode_matmul that prints the bench's rows
# with a sum read from the copy's kernels/decode_matmul.cu (so a patch that changes that
# file changes the figure), and a 09_decode_matmuls that writes --json with the batch in its
# time. Checked: a missing patch or chapter exits 2 and a patch that does not apply exits 1,
# none having built anything; two variants give the summary's rows a 1, b 1, a 2, b 2 in
# that order, each with its own figure; two chapters give each its columns; a chapter
# listed plain and with a flag (09_decode_matmuls:tf32) is built once and gives two sets
# of columns, which ab_ratios.py reads as "09" and "09 --tf32"; with LADDER_AB_TIMELINE
# each variant's step timeline is kept and ab_ratios.py reads it, and a batch there that
# is not a number exits 2; with LADDER_AB_BENCH=0 the bench is neither built nor run and
# the summary says "not run" (another value exits 2); a program that fails is named and
# the script exits 1.
set -euo pipefail
# shellcheck source=tests/scripts/stand_ins.sh
source "$(dirname "$0")/stand_ins.sh"

stand_in_nvidia_smi
cat > "$work/bin/cmake" << 'EOF'
#!/usr/bin/env bash
# configure: record it; --build: write the two programs into ./build/native
echo "$PWD $*" >> "$CMAKE_CALLS"
[ "$1" = --build ] || exit 0
mkdir -p build/native/bench build/native/chapters
sum=$(grep -c 'stages_for' kernels/decode_matmul.cu)
cat > build/native/bench/decode_matmul << BENCH
#!/bin/sh
[ -n "\${AB_FAIL_BENCH:-}" ] && exit 3
for b in 1 8 32 64; do
  echo "| LM head   768 x 50257 (+ argmax pass) | 1 x 786 | 36.7 | 5\$b.0 (2963) | 1 | 1 | 1 |"
  echo "| step: sum over the 49 products | | 117.6 | $sum\$b.5 | 1 | 1 | 1 |"
  if [ "\$b" = 64 ]; then  # the bench's two last columns: the chains without clusters
    echo "| the step (86 launches, 49 products) | fp32 | $sum\$b.1 | 9.9 | $sum\$b.3 | 0.1 | -0.1 | $sum\$b.7 | $sum\$b.8 | $sum\$b.9 |"
  else
    echo "| the step (86 launches, 49 products) | fp32 | $sum\$b.1 | 9.9 | $sum\$b.3 | 0.1 | 0.1 |"
  fi
  echo "| the step (86 launches, 49 products) | tf32 | 7.7 | 7.7 | 7.7 | 0.1 | 0.1 |"
done
BENCH
chmod +x build/native/bench/decode_matmul
seen=0  # ... --target [decode_matmul] CHAPTER [CHAPTER ...]: a program for every chapter
for target in "$@"; do
  [ "$seen" = 1 ] && [ "$target" != decode_matmul ] && {
    cat > "build/native/chapters/$target" << 'CHAPTER'
#!/usr/bin/env python3
import json, sys
a = sys.argv
if "--step-timeline" in a:  # one step's kernels as the chapters print them
    print("batch %s, 20 new tokens: step 11 of the 21 traced, 2 kernels, 5.0 us:" % a[a.index("--batch") + 1])
    print("  start us   end us  took us  adds us  kernel")
    print("       0.0      2.0      2.0      2.0  embedding_kernel")
    print("       1.0      5.0      4.0      3.0  decode_matmul<64>")
    sys.exit(0)
batch, out = int(a[a.index("--batch") + 1]), a[a.index("--json") + 1]
scale = 2000 if "--tf32" in a else 1000  # a flagged run: its own figures
json.dump({"configurations": [{"ms_per_step": batch / scale, "token_hash": "feedc0de"}]}, open(out, "w"))
CHAPTER
    chmod +x "build/native/chapters/$target"; }
  [ "$target" = --target ] && seen=1
done
exit 0
EOF
chmod +x "$work/bin/nvidia-smi" "$work/bin/cmake"
export PATH=$work/bin:$PATH CMAKE_CALLS=$work/cmake_calls

# a patch that adds one stages_for line (so variant b's bench prints a larger sum), and
# one whose context is not in the tree
cat > "$work/adds_a_line.patch" << 'EOF'
--- a/kernels/decode_matmul.cu
+++ b/kernels/decode_matmul.cu
@@ -1,1 +1,2 @@
+// stages_for: a line the stand-in bench counts
EOF
sed -n 1p "$repository/kernels/decode_matmul.cu" | sed 's/^/ /' >> "$work/adds_a_line.patch"
cat > "$work/stale.patch" << 'EOF'
--- a/kernels/decode_matmul.cu
+++ b/kernels/decode_matmul.cu
@@ -1,1 +1,1 @@
-a line that is not in the file
+its replacement
EOF

# The tree's own kernel, to check afterwards that the patches touched only the copies (a
# checksum, not git: a copy of the tree without its history, or owned by another user,
# is a tree all the same).
tree_kernel=$(sha256sum < "$repository/kernels/decode_matmul.cu")
run() { OUT=$work/out.$1 bash "$repository/scripts/ab_kernel.sh" "${@:2}" > "$work/log.$1" 2>&1; }

: > "$CMAKE_CALLS"
set +e
run missing "$work/no_such.patch"; code=$?
set -e
[ "$code" -eq 2 ] || fail "a missing patch: exit $code, expected 2"
grep -q "no patch file .*no_such.patch" "$work/log.missing" || fail "a missing patch is not named"
set +e
run stale "$work/adds_a_line.patch" "$work/stale.patch"; code=$?
set -e
[ "$code" -eq 1 ] || fail "a patch that does not apply: exit $code, expected 1"
grep -q "stale.patch does not apply" "$work/log.stale" || fail "the stale patch is not named"
[ ! -s "$CMAKE_CALLS" ] || fail "cmake ran before the patches were checked: $(cat "$CMAKE_CALLS")"

run good "$work/adds_a_line.patch" || fail "two good variants: exit $? ($(tail -3 "$work/log.good"))"
[ "$(grep -c -- '--build' "$CMAKE_CALLS")" -eq 2 ] || fail "not one build per variant"
[ "$(cut -d' ' -f1 "$CMAKE_CALLS" | sort -u | wc -l)" -eq 2 ] || fail "the variants share a tree"
[ "$(sha256sum < "$repository/kernels/decode_matmul.cu")" = "$tree_kernel" ] ||
  fail "the patch touched the repository's own tree"
base=$(grep -c 'stages_for' "$repository/kernels/decode_matmul.cu")
rows=$(grep -E '^[ab] [12] \|' "$work/log.good" | cut -c1-3 | tr '\n' ',')
[ "$rows" = "a 1,b 1,a 2,b 2," ] || fail "summary rows '$rows', expected a 1, b 1, a 2, b 2"
grep -qE "^a 1 \| ${base}1\.5 ${base}8\.5 ${base}32\.5 ${base}64\.5 \| 51\.0 \| 0\.0010 \(feedc0de\) \| 0\.0320 \(feedc0de\)$" \
  "$work/log.good" || fail "variant a's row: $(grep '^a 1' "$work/log.good")"
grep -qE "^b 2 \| $((base + 1))1\.5 " "$work/log.good" ||
  fail "variant b's row does not read its patched tree: $(grep '^b 2' "$work/log.good")"
grep -qxF "chain a 1 | ${base}1.1 / ${base}1.3 | ${base}8.1 / ${base}8.3 | ${base}32.1 / ${base}32.3 | ${base}64.1 / ${base}64.3 (no clusters ${base}64.7 / ${base}64.8) (all programmatic ${base}64.9)" \
  "$work/log.good" || fail "variant a's chain row: $(grep '^chain a 1' "$work/log.good")"
grep -qE "^chain b 2 \| $((base + 1))1\.1 / " "$work/log.good" ||
  fail "variant b's chain row does not read its patched tree: $(grep '^chain b 2' "$work/log.good")"
tar -tzf "$work/out.good/ab.tar.gz" > "$work/listing"
grep -q 'ab/b.patch' "$work/listing" || fail "the patch is not kept with the outputs"

# chapter_columns NAME ENTRIES HEADER ROW: one round with LADDER_AB_CHAPTERS=ENTRIES; the
# summary's header must end with HEADER (plain text), variant b's row with ROW (a regex).
chapter_columns() {
  local name=$1 entries=$2 header=$3 row=$4
  LADDER_AB_CHAPTERS="$entries" LADDER_AB_ROUNDS=1 run "$name" "$work/adds_a_line.patch" ||
    fail "$name: exit $? ($(tail -3 "$work/log.$name"))"
  [[ "$(grep '^variant' "$work/log.$name")" == *"$header" ]] ||
    fail "$name: the summary's header: $(grep '^variant' "$work/log.$name")"
  grep -qE "^b 1 \| .* \| $row\$" "$work/log.$name" ||
    fail "$name: variant b's row: $(grep '^b 1' "$work/log.$name")"
}
chapter_columns two "09_decode_matmuls 10_mixed_precision" \
  '| 09 B = 1 ms/step (hash) | 09 B = 32 ms/step (hash) | 10 B = 1 ms/step (hash) | 10 B = 32 ms/step (hash)' \
  '0\.0010 \(feedc0de\) \| 0\.0320 \(feedc0de\) \| 0\.0010 \(feedc0de\) \| 0\.0320 \(feedc0de\)'
: > "$CMAKE_CALLS"
chapter_columns flag "09_decode_matmuls 09_decode_matmuls:tf32" \
  '| 09 B = 1 ms/step (hash) | 09 B = 32 ms/step (hash) | 09 --tf32 B = 1 ms/step (hash) | 09 --tf32 B = 32 ms/step (hash)' \
  '0\.0010 \(feedc0de\) \| 0\.0320 \(feedc0de\) \| 0\.0005 \(feedc0de\) \| 0\.0160 \(feedc0de\)'
grep -- '--build' "$CMAKE_CALLS" | grep -q -- '--target decode_matmul 09_decode_matmuls$' ||
  fail "a chapter with a flag: not built once: $(grep -- '--build' "$CMAKE_CALLS" | head -1)"
python3 "$repository/scripts/ab_ratios.py" "$work/out.flag/ab.tar.gz" > "$work/ratios.flag" ||
  fail "ab_ratios.py cannot read a flagged run's archive"
grep -qF '| 09 --tf32, B = 32 | 0.0160 | 1.000 |' "$work/ratios.flag" ||
  fail "ab_ratios.py: the flagged run's row: $(cat "$work/ratios.flag")"
# LADDER_AB_TIMELINE: each variant's step timeline kept, and set side by side by ab_ratios.py.
LADDER_AB_CHAPTERS="09_decode_matmuls:tf32" LADDER_AB_ROUNDS=1 LADDER_AB_TIMELINE=64 \
  run timeline "$work/adds_a_line.patch" || fail "timeline: exit $? ($(tail -3 "$work/log.timeline"))"
tar -tzf "$work/out.timeline/ab.tar.gz" > "$work/listing.timeline"
for v in a b; do
  grep -qx "ab/$v.r1.09-tf32.b64.timeline.txt" "$work/listing.timeline" ||
    fail "timeline: no ab/$v.r1.09-tf32.b64.timeline.txt in $(tr '\n' ' ' < "$work/listing.timeline")"
done
python3 "$repository/scripts/ab_ratios.py" "$work/out.timeline/ab.tar.gz" > "$work/ratios.timeline" ||
  fail "ab_ratios.py cannot read an archive with timelines"
grep -qF '| `decode_matmul<64>` | 3.0 | +0.0 |' "$work/ratios.timeline" ||
  fail "ab_ratios.py: the timelines' table: $(cat "$work/ratios.timeline")"
set +e
LADDER_AB_TIMELINE="64 x" run badtimeline "$work/adds_a_line.patch"; code=$?
set -e
[ "$code" -eq 2 ] || fail "LADDER_AB_TIMELINE with a word in it: exit $code, expected 2"

# LADDER_AB_BENCH=0: the bench neither built nor run, and the summary says so.
: > "$CMAKE_CALLS"
LADDER_AB_BENCH=0 LADDER_AB_ROUNDS=1 run nobench "$work/adds_a_line.patch" ||
  fail "nobench: exit $? ($(tail -3 "$work/log.nobench"))"
grep -- '--build' "$CMAKE_CALLS" | grep -q -- '--target 09_decode_matmuls$' ||
  fail "nobench: built $(grep -- '--build' "$CMAKE_CALLS" | head -1)"
! tar -tzf "$work/out.nobench/ab.tar.gz" | grep -q decode_matmul.txt ||
  fail "nobench: the bench ran"
grep -qE '^b 1 \| not run \| - \| 0\.0010 \(feedc0de\)' "$work/log.nobench" ||
  fail "nobench: variant b's row: $(grep '^b 1' "$work/log.nobench")"
grep -qxF 'chain b 1 | not run' "$work/log.nobench" ||
  fail "nobench: the chain row: $(grep '^chain b 1' "$work/log.nobench")"
set +e
LADDER_AB_BENCH=no run badbench "$work/adds_a_line.patch"; code=$?
set -e
[ "$code" -eq 2 ] || fail "LADDER_AB_BENCH=no: exit $code, expected 2"

set +e
LADDER_AB_CHAPTERS="09_decode_matmuls:--tf32" run badflag "$work/adds_a_line.patch"; code=$?
set -e
[ "$code" -eq 2 ] || fail "a flag written with its dashes: exit $code, expected 2"

set +e
LADDER_AB_CHAPTERS=12_no_such_chapter run nochapter "$work/adds_a_line.patch"; code=$?
set -e
[ "$code" -eq 2 ] || fail "an unknown chapter: exit $code, expected 2"
grep -q "no chapter 12_no_such_chapter" "$work/log.nochapter" || fail "the unknown chapter is not named"

set +e
AB_FAIL_BENCH=1 run broken "$work/adds_a_line.patch"; code=$?
set -e
[ "$code" -eq 1 ] || fail "a failing bench: exit $code, expected 1"
grep -q "variant a round 1: decode_matmul FAILED" "$work/log.broken" || fail "the failed run is not named"
grep -qE '^a 1 \| FAILED \| - \| 0\.0010' "$work/log.broken" ||
  fail "the summary hides the failed bench: $(grep '^a 1' "$work/log.broken")"
grep -qxF 'chain a 1 | FAILED' "$work/log.broken" ||
  fail "the chain rows hide the failed bench: $(grep '^chain a 1' "$work/log.broken")"

[ "$failures" -eq 0 ] && echo "ab_kernel.sh: refuses bad patches, builds and runs each variant apart, reads the summary"
exit "$failures"
