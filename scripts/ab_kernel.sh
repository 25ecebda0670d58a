#!/usr/bin/env bash
# scripts/ab_kernel.sh - one kernel change against the tree as it is, on one GPU, in one call.
#
#   bash scripts/ab_kernel.sh PATCH [PATCH ...]
#
# Variant a is the working tree as it is; variant b applies the first PATCH (git diff
# format, paths from the repository root), c the second, and so on. Each variant is a copy
# of the tree (no build/, no results/) built with the native preset, tests off, targets
# decode_matmul (bench/; left out with LADDER_AB_BENCH=0, for a change whose products
# the bench does not run, such as the persistent kernel's) and the chapters of
# LADDER_AB_CHAPTERS (default
# "09_decode_matmuls"; an entry NN_name:FLAG runs that chapter with --FLAG, e.g.
# "09_decode_matmuls 09_decode_matmuls:tf32", its runs named "NN --FLAG") only. Then
# LADDER_AB_ROUNDS rounds (default 2), each running every variant in turn, a before b
# before c:
#   bench/decode_matmul         every product at B = 1, 8, 32, 64 (GPU us per product);
#                               "not run" in the summary with LADDER_AB_BENCH=0
#   each chapter                --batch B --new-tokens 100 --runs 5 for B in LADDER_AB_BATCHES
#                               (default "1 32"), with --json
#   with LADDER_AB_TIMELINE="64" (B values; default none), each chapter also at those B
#                               with --new-tokens 20 --runs 1 --step-timeline: one traced
#                               step's kernels in order, each with what its end adds to
#                               the step (ab/V.rR.CH.bB.timeline.txt; ab_ratios.py sets
#                               the variants' side by side)
# so a difference between variants is read within one machine and one round, and the
# rounds say how far one process differs from the next. Everything lands in
# $OUT/ab.tar.gz (or ./ab_out); a short summary is printed last: per variant and round the
# bench's "sum over the 49 products" at each B, the LM head at B = 1, and each chapter's
# ms a step and token hash at each B; then the bench's fp32 chain of the step's 86
# launches at each B, plain and programmatic (rows "chain VARIANT ROUND"). Exits 2 on a missing patch, 1 on one that does not apply (before
# anything is built), on a failed build, or when any run failed (named in the output).
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: bash scripts/ab_kernel.sh PATCH [PATCH ...]" >&2; exit 2; }
command -v patch > /dev/null || { echo "ab_kernel.sh: needs GNU patch (apt-get install patch)" >&2; exit 2; }
given=()
for patch in "$@"; do
  [ -f "$patch" ] || { echo "ab_kernel.sh: no patch file $patch" >&2; exit 2; }
  given+=("$(realpath "$patch")")
done
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=${OUT:-$root/ab_out}
for patch in "${given[@]}"; do
  # every patch must apply to the tree as it is before anything is built
  patch -p1 --dry-run --quiet --force < "$patch" > /dev/null 2>&1 ||
    { echo "ab_kernel.sh: $patch does not apply to this tree" >&2; exit 1; }
done
rounds=${LADDER_AB_ROUNDS:-2}
batches=${LADDER_AB_BATCHES:-1 32}
timeline_batches=${LADDER_AB_TIMELINE:-}
export LADDER_AB_BENCH=${LADDER_AB_BENCH:-1}  # the summary below reads it too
[[ "$LADDER_AB_BENCH" =~ ^[01]$ ]] ||
  { echo "ab_kernel.sh: LADDER_AB_BENCH is 1 (run bench/decode_matmul, the default) or 0" >&2; exit 2; }
for b in $batches $timeline_batches; do
  [[ "$b" =~ ^[0-9]+$ ]] || { echo "ab_kernel.sh: '$b' is not a batch size (LADDER_AB_BATCHES, LADDER_AB_TIMELINE)" >&2; exit 2; }
done
read -ra entries <<< "${LADDER_AB_CHAPTERS:-09_decode_matmuls}"
chapters=()  # the targets to build, each once
for entry in "${entries[@]}"; do
  chapter=${entry%%:*}
  [ -d "chapters/$chapter" ] || { echo "ab_kernel.sh: no chapter $chapter (LADDER_AB_CHAPTERS)" >&2; exit 2; }
  [[ "$entry" != *:* || "${entry#*:}" =~ ^[a-z0-9]+$ ]] ||
    { echo "ab_kernel.sh: $entry: the flag after ':' is a chapter flag's name, e.g. tf32" >&2; exit 2; }
  [[ " ${chapters[*]} " == *" $chapter "* ]] || chapters+=("$chapter")
done
targets=()
[ "$LADDER_AB_BENCH" = 1 ] && targets+=(decode_matmul)
targets+=("${chapters[@]}")
work=$(mktemp -d)
mkdir -p "$out/ab"

extra=()
if ls .deps/*.deb >/dev/null 2>&1; then
  for deb in .deps/*.deb; do dpkg -x "$deb" "$work/deps"; done
  extra+=("-DCMAKE_PREFIX_PATH=$work/deps/usr")
fi

names=(a)
patches=("")
letter=b
for patch in "${given[@]}"; do
  names+=("$letter"); patches+=("$patch")
  letter=$(echo "$letter" | tr 'a-y' 'b-z')
done

for i in "${!names[@]}"; do
  v=${names[$i]}
  src=$work/$v
  mkdir -p "$src"
  tar -C "$root" --exclude=./build --exclude=./results --exclude=./.git -cf - . | tar -C "$src" -xf -
  if [ -n "${patches[$i]}" ]; then
    (cd "$src" && patch -p1 --quiet --force < "${patches[$i]}") > /dev/null ||
      { echo "ab_kernel.sh: variant $v: ${patches[$i]} does not apply" >&2; exit 1; }
    cp "${patches[$i]}" "$out/ab/$v.patch"
  fi
  start=$(date +%s)
  if (cd "$src" && cmake --preset native -DLADDER_BUILD_TESTS=OFF "${extra[@]}" &&
      cmake --build --preset native -j "$(nproc)" --target "${targets[@]}") \
      > "$out/ab/$v.build.log" 2>&1; then
    echo "== variant $v: built in $(( $(date +%s) - start )) s ${patches[$i]:+(${patches[$i]##*/})}"
  else
    echo "== variant $v: build FAILED"; tail -30 "$out/ab/$v.build.log"; exit 1
  fi
done

failed=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/ab/nvidia-smi.txt" 2>&1
for round in $(seq 1 "$rounds"); do
  for v in "${names[@]}"; do
    bin=$work/$v/build/native
    if [ "$LADDER_AB_BENCH" = 1 ] &&
        ! timeout 300 "$bin/bench/decode_matmul" > "$out/ab/$v.r$round.decode_matmul.txt" 2>&1; then
      echo "== variant $v round $round: decode_matmul FAILED"; failed=1
    fi
    for entry in "${entries[@]}"; do
      chapter=${entry%%:*}
      flags=(); key=${chapter%%_*}
      if [[ "$entry" == *:* ]]; then flags=("--${entry#*:}"); key=$key-${entry#*:}; fi
      for b in $batches; do
        run=$out/ab/$v.r$round.$key.b$b
        if ! timeout 300 "$bin/chapters/$chapter" "${flags[@]}" --batch "$b" --new-tokens 100 \
            --runs 5 --json "$run.json" > "$run.txt" 2>&1; then
          echo "== variant $v round $round: $chapter ${flags[*]} at B = $b FAILED"; failed=1
        fi
      done
      for b in $timeline_batches; do
        run=$out/ab/$v.r$round.$key.b$b.timeline.txt
        if ! timeout 300 "$bin/chapters/$chapter" "${flags[@]}" --batch "$b" --new-tokens 20 \
            --runs 1 --step-timeline --quiet > "$run" 2>&1; then
          echo "== variant $v round $round: $chapter ${flags[*]} --step-timeline at B = $b FAILED"; failed=1
        fi
      done
    done
  done
done

python3 - "$out/ab" "$rounds" "$batches" "${entries[*]}" "${names[@]}" <<'EOF' | tee "$out/ab/summary.txt"
import json, os, re, sys
from pathlib import Path
folder, rounds, batches = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
missing = "FAILED" if os.environ["LADDER_AB_BENCH"] == "1" else "not run"  # the bench's figures
names = sys.argv[5:]
# An entry NN_name or NN_name:FLAG: its files' key "NN" or "NN-FLAG", its label "NN --FLAG".
keys = []
for entry in sys.argv[4].split():
    chapter, _, flag = entry.partition(":")
    number = chapter.split("_")[0]
    keys.append((f"{number}-{flag}", f"{number} --{flag}") if flag else (number, number))
runs = [(key, label, b) for key, label in keys for b in batches]
print("variant round | products summed (fp32 us) at B = 1, 8, 32, 64 | LM head B = 1 | "
      + " | ".join(f"{label} B = {b} ms/step (hash)" for _, label, b in runs))
for r in range(1, rounds + 1):
    for v in names:
        bench = folder / f"{v}.r{r}.decode_matmul.txt"
        text = bench.read_text(errors="replace") if bench.exists() else ""
        sums = re.findall(r"^\| step: sum over the 49 products \| \| [\d.]+ \| ([\d.]+)", text, re.M)
        head = re.search(r"^\| LM head[^|]*\|[^|]*\|[^|]*\| ([\d.]+)", text, re.M)
        cells = []
        for n, _, b in runs:
            path = folder / f"{v}.r{r}.{n}.b{b}.json"
            try:
                c = json.loads(path.read_text())["configurations"][0]
                cells.append(f"{c['ms_per_step']:.4f} ({c['token_hash']})")
            except (OSError, ValueError, KeyError, IndexError):
                cells.append("FAILED")
        print(f"{v} {r} | {' '.join(sums) or missing} | {head.group(1) if head else '-'} | "
              + " | ".join(cells))
# The bench's chain of the step's 86 launches, fp32: what a product's change does between
# the LayerNorms and the attention, plainly launched and as the chapters launch it; and,
# where the bench prints them, the same two chains with no split sums in clusters, and the
# second with the LayerNorms and the attention launched programmatically too.
print("\nchain variant round | the step's chain, fp32 us per graph, plain / programmatic "
      "(signal at start) at B = 1, 8, 32, 64 (no clusters: the same, every split summed "
      "through the workspace)")
for r in range(1, rounds + 1):
    for v in names:
        bench = folder / f"{v}.r{r}.decode_matmul.txt"
        text = bench.read_text(errors="replace") if bench.exists() else ""
        chains = re.findall(r"^\| the step \(86 launches, 49 products\) \| fp32 \| ([\d.]+) \| "
                            r"[\d.]+ \| ([\d.]+) \|(?: [-\d.]+ \| [-\d.]+ \| ([\d.]+) \| ([\d.]+) \|"
                            r"(?: ([\d.]+) \|)?)?", text, re.M)
        print(f"chain {v} {r} | "
              + (" | ".join(f"{plain} / {start}"
                            + (f" (no clusters {bare_plain} / {bare_start})" if bare_plain else "")
                            + (f" (all programmatic {everything})" if everything else "")
                            for plain, start, bare_plain, bare_start, everything in chains)
                 or missing))
EOF
tar -czf "$out/ab.tar.gz" -C "$out" ab && rm -rf "$out/ab" "$work"
exit "$failed"
