#!/usr/bin/env bash
# tests/scripts/test_run_ladder_sizes.sh - the main job's size sweep: scripts/run_ladder.sh
# runs chapters 07 onward (not 12) with --model medium, large and xl at B = 1 and 32,
# N = 100, into RESULTS_DIR/sizes/MODEL/, and the compiled PyTorch anchors at the same sizes;
# --no-sizes leaves them out, --sizes-only runs them alone beside the results already there.
#
#   bash tests/scripts/test_run_ladder_sizes.sh
#
# Needs no GPU, no build and no torch: run_ladder.sh runs in a copy of the tree's scripts
# whose build, chapters, PyTorch script and renderer are stand-ins that record how they
# were called (and a chapter writes a minimal --json file).
set -euo pipefail
# shellcheck source=tests/scripts/stand_ins.sh
source "$(dirname "$0")/stand_ins.sh"

tree=$work/tree
calls=$work/calls
mkdir -p "$tree/scripts" "$tree/build/ci/chapters" "$work/python/torch" "$work/python/transformers"
cp "$repository/scripts/run_ladder.sh" "$tree/scripts/"
stand_in_nvidia_smi
printf '#!/bin/sh\nexit 0\n' > "$work/bin/cmake"
chmod +x "$work/bin/cmake"
: > "$work/python/torch/__init__.py"
: > "$work/python/transformers/__init__.py"
printf 'exit 0\n' > "$tree/scripts/install_dependencies.sh"
printf 'import pathlib, sys\nopen("%s", "a").write("render_results " + " ".join(sys.argv[1:]) + "\\n")\n(pathlib.Path(sys.argv[1]) / "summary.md").write_text("summary\\n")\n' \
  "$calls" > "$tree/scripts/render_results.py"
for script in refresh_source_times render_computed_tables; do
  printf 'import sys\nopen("%s", "a").write("%s " + " ".join(sys.argv[1:]) + "\\n")\n' \
    "$calls" "$script" > "$tree/scripts/$script.py"
done
printf 'import sys\nopen("%s", "a").write("pytorch " + " ".join(sys.argv[1:]) + "\\n")\n' \
  "$calls" > "$tree/scripts/pytorch_baseline.py"
for name in 00_cpu_reference 01_naive_decode 06_stream_interleaving 07_cuda_graphs \
            09_decode_matmuls 11_persistent_kernel 12_continuous_batching; do
  mkdir -p "$tree/chapters/$name"
  cat > "$tree/build/ci/chapters/$name" <<EOF
#!/usr/bin/env bash
echo "$name \$*" >> "$calls"
while [ \$# -gt 0 ]; do
  if [ "\$1" = --json ]; then
    echo '{"chapter": "$name", "configurations": [], "copy_bandwidth_bytes_per_s": 1}' > "\$2"
  fi
  shift
done
EOF
  chmod +x "$tree/build/ci/chapters/$name"
done

job() {  # job ARGS...: run_ladder.sh into $tree/results/run, its output in $work/log
  local status=0
  : > "$calls"
  (cd "$tree" && PATH="$work/bin:$PATH" PYTHONPATH="$work/python" LADDER_PRESET=ci LADDER_RUNS=1 \
    bash scripts/run_ladder.sh results/run "$@") > "$work/log" 2>&1 || status=$?
  [ "$status" -eq 0 ] || { fail "run_ladder.sh $* exited with $status"; cat "$work/log"; }
}
not_called() { ! grep -qF -- "$1" "$calls" || fail "called: '$1' ($(grep -F -- "$1" "$calls" | head -1))"; }

# The whole job: the main runs, then every size of 07 on, then the PyTorch rows and anchors.
job
out=$tree/results/run
grep -q '^07_cuda_graphs --batch 32 --new-tokens 100,200,400 ' "$calls" || fail "07's main run missing"
for model in medium large xl; do
  for name in 07_cuda_graphs 09_decode_matmuls 11_persistent_kernel; do
    grep -qE "^$name --model $model --batch 1,32 --new-tokens 100 --json .*/sizes/$model/$name.json --runs 1\$" \
      "$calls" || fail "$name at $model: not run as expected"
    [ -f "$out/sizes/$model/$name.json" ] || fail "$out/sizes/$model/$name.json missing"
  done
  grep -qE "^pytorch --out .*/sizes/$model --model $model --variants hf_static_compiled,static_step_compiled --precision fp32,bf16 --batch 1,32 --new-tokens 100 --sweep-batch none " \
    "$calls" || fail "the anchors at $model: not run as expected"
done
for name in 00_cpu_reference 01_naive_decode 06_stream_interleaving 12_continuous_batching; do
  not_called "$name --model"
done
grep -q '^pytorch --out .* --new-tokens 100,200,400 ' "$calls" || fail "the main PyTorch rows missing"
[ -f "$out/run.json" ] || fail "no run.json"
[ -f "$out/07_cuda_graphs.json" ] || fail "no main result of 07"

# --no-sizes: GPT-2 small only.
job --no-sizes
not_called "--model"
not_called "/sizes/"

# --sizes-only: the sizes alone, the earlier results kept (run.json, 07's main file).
echo '{"mark": "earlier"}' > "$out/run.json"
LADDER_SIZES=xl job --sizes-only --no-pytorch
grep -q '"mark": "earlier"' "$out/run.json" || fail "--sizes-only rewrote run.json"
[ -f "$out/07_cuda_graphs.json" ] || fail "--sizes-only removed the main results"
grep -q -- "--batch 32 --new-tokens" "$calls" && fail "--sizes-only ran a main configuration"
grep -q '^07_cuda_graphs --model xl ' "$calls" || fail "--sizes-only did not run 07 at xl"
not_called "--model medium"
not_called "pytorch"
grep -q '^render_results ' "$calls" || fail "--sizes-only did not render"

if [ "$failures" -gt 0 ]; then
  echo "--- the last job's calls:"; cat "$calls"
  exit 1
fi
echo "run_ladder.sh: the size sweep runs 07 on and the anchors at medium, large and xl; --no-sizes and --sizes-only as documented"
