#!/usr/bin/env bash
# scripts/run_ladder.sh - THE main job: builds the chapters, runs the whole ladder and the
# PyTorch variants of scripts/pytorch_baseline.py on the same workload, and prints the
# comparison table.
#
#   bash scripts/run_ladder.sh [RESULTS_DIR] [--quick] [--no-pytorch] [-- CHAPTER_FLAGS...]
#
# 1. Builds (preset "native": the GPU in this machine; LADDER_PRESET overrides it).
# 2. Runs every chapters/NN_name/ that has an executable, in ladder order, twice: at B = 32
#    with N = 100, 200, 400, and for the batch sweep at B = 1, 8, 64 with N = 100 (B = 32,
#    N = 100 comes from the first run). Each chapter measures the copy bandwidth itself and
#    prints a progress line per run; its JSON goes to RESULTS_DIR/NN_name.json and
#    NN_name.sweep.json.
#    Then GPT-2's larger sizes (--model medium, large, xl: random weights of that shape)
#    through the last rungs, chapters 07 onward, at B = 1 and 32 with N = 100, into
#    RESULTS_DIR/sizes/MODEL/NN_name.json (GPT-2 small's rows are the runs above).
# 3. Writes RESULTS_DIR/run.json: GPU, driver, CUDA version, date, git commit (and whether the
#    tree had uncommitted changes), the copy bandwidth the chapters measured.
# 4. Runs scripts/pytorch_baseline.py into RESULTS_DIR when torch and transformers import
#    (otherwise one line says why the PyTorch rows are skipped); then its compiled anchors
#    (hf_static_compiled, static_step_compiled) at the same larger sizes, B = 1 and 32,
#    N = 100, fp32 and bf16, into RESULTS_DIR/sizes/MODEL/.
# 5. Runs scripts/render_results.py: RESULTS_DIR/summary.md, docs/images/results_*.png, and
#    the tables between the markers of README.md, docs/results.md and chapter READMEs;
#    into results/latest, scripts/render_computed_tables.py too (the pages' computed tables).
# 6. Prints the summary last.
#
# RESULTS_DIR defaults to results/latest. Options:
#   --quick        N = 100 only, 3 timed runs, into results/quick; README and docs untouched;
#                  no larger sizes
#   --no-pytorch   no PyTorch rows
#   --no-sizes     GPT-2 small only: no medium, large and xl rows
#   --sizes-only   only the larger sizes (chapters, then the anchors unless --no-pytorch) and
#                  step 5, into a RESULTS_DIR that holds the rest of the run: the job split
#                  over calls of limited length, like --pytorch-only
#   --pytorch-only only step 4 and 5, into a RESULTS_DIR that holds the chapters' results:
#                  for a machine whose commands may not run long enough for the whole job
#                  (run the job with --no-pytorch, then this, on the same machine)
#   -- FLAGS...    passed to every chapter run (e.g. -- --warmup 2)
# Environment: LADDER_RUNS (timed runs per chapter configuration, default 5; 3 with --quick),
# LADDER_PYTORCH_RUNS (timed runs per PyTorch configuration, default 3, as the committed PyTorch
# rows: 5 would add about 2 minutes to a job of about 11), LADDER_PRESET, LADDER_COMMIT,
# LADDER_PYTORCH_FLAGS (extra flags for scripts/pytorch_baseline.py, e.g. "--precision
# tf32"), LADDER_SIZES (the larger sizes run, default "medium large xl"),
# LADDER_SIZE_PRECISIONS (the anchors' precisions at those sizes, default fp32,bf16),
# LADDER_PYTORCH_SWEEP=1 (PyTorch rows for the batch sweep too; the compiled
# anchors always run it, see scripts/pytorch_baseline.py --sweep-batch).
#
# Nothing is lost when a run does not complete. Without a GPU (nvidia-smi lists none) the
# job says so in one line and exits with code 3 before it builds or writes anything. A
# run writes into a fresh folder beside RESULTS_DIR (RESULTS_DIR.partial.XXXXXX, a copy
# of RESULTS_DIR's files) and replaces RESULTS_DIR with it only once every chapter and
# the PyTorch step are done; a run that stops half-way (a chapter fails or finds no
# device, Ctrl-C) removes that folder and leaves RESULTS_DIR as it was.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
error() { echo "run_ladder.sh: error: $*" >&2; exit 2; }

out=""
quick=0
pytorch=1
pytorch_only=0
sizes=1
sizes_only=0
chapter_flags=()
started=$(date +%s)
elapsed() { echo "$(( $(date +%s) - started )) s"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --no-pytorch) pytorch=0; shift ;;
    --pytorch-only) pytorch_only=1; shift ;;
    --no-sizes) sizes=0; shift ;;
    --sizes-only) sizes_only=1; shift ;;
    --out) [ $# -ge 2 ] || error "--out needs a directory"; out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; chapter_flags=("$@"); break ;;
    -*) error "unknown option '$1' (chapter flags go after --; see --help)" ;;
    *) [ -z "$out" ] || error "one results directory only ('$out', then '$1')"; out=$1; shift ;;
  esac
done
runs=${LADDER_RUNS:-$([ $quick = 1 ] && echo 3 || echo 5)}
[[ $runs =~ ^[1-9][0-9]*$ ]] || error "LADDER_RUNS must be a whole number >= 1, not '$runs'"
pytorch_runs=${LADDER_PYTORCH_RUNS:-3}
[[ $pytorch_runs =~ ^[1-9][0-9]*$ ]] ||
  error "LADDER_PYTORCH_RUNS must be a whole number >= 1, not '$pytorch_runs'"
[ "$pytorch_runs" -gt "$runs" ] && pytorch_runs=$runs
out=${out:-$([ $quick = 1 ] && echo results/quick || echo results/latest)}
out=${out%/}
main_tokens=$([ $quick = 1 ] && echo 100 || echo 100,200,400)
[ $pytorch_only = 1 ] && [ $pytorch = 0 ] && error "--pytorch-only and --no-pytorch exclude each other"
[ $sizes_only = 1 ] && [ $sizes = 0 ] && error "--sizes-only and --no-sizes exclude each other"
[ $sizes_only = 1 ] && [ $pytorch_only = 1 ] && error "--sizes-only and --pytorch-only exclude each other"
[ $sizes_only = 1 ] && [ $quick = 1 ] && error "--sizes-only and --quick exclude each other"
if [ $quick = 1 ]; then sizes=0; fi
size_models=${LADDER_SIZES:-medium large xl}
for model in $size_models; do
  case $model in medium|large|xl) ;; *) error "LADDER_SIZES: '$model' is not medium, large or xl" ;; esac
done
size_precisions=${LADDER_SIZE_PRECISIONS:-fp32,bf16}
command -v python3 >/dev/null || error "python3 not found: it renders the results (apt-get install python3)"

# ---- a device, before anything is built or written
# nvidia-smi answers without the build; where it is missing, the driver's /proc entry
# does. (The chapters check again, and a run that stops leaves RESULTS_DIR as it was.)
gpu_visible() {
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L >/dev/null 2>&1
  else
    compgen -G "/proc/driver/nvidia/gpus/*" >/dev/null
  fi
}
if ! gpu_visible; then
  echo "run_ladder.sh: error: no CUDA device found (nvidia-smi lists no GPU): nothing was" \
       "built or run, and $out is unchanged" >&2
  exit 3
fi

# ---- a fresh folder for this run, which replaces $out only once the run has completed
mkdir -p "$(dirname "$out")"
staging=$(mktemp -d "${out%/}.partial.XXXXXX")
chmod u=rwx,go=rx "$staging"
previous="$staging.previous"
replaced=0
finish() {
  local status=$?
  rm -rf "$staging" "$previous"
  if [ $status -ne 0 ] && [ $replaced = 0 ]; then
    echo "run_ladder.sh: the run did not complete: $out is as it was" >&2
  fi
}
trap finish EXIT
if [ -d "$out" ]; then cp -a "$out"/. "$staging"/; fi

# The tree as it is before this run adds results: which commit, and whether a tracked file
# was edited (untracked files, such as carried dependency packages, do not count).
# LADDER_COMMIT names the commit where the tree travels without a .git that matches it (a
# remote GPU machine that copies the working tree: its .git, if any, may be an older
# snapshot). Then the caller vouches for the tree and git is not asked ("unknown").
if [ -n "${LADDER_COMMIT:-}" ]; then
  commit=$LADDER_COMMIT
  dirty=unknown
else
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=false
  if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no -- . ':(exclude)results' 2>/dev/null)" ]; then
    dirty=true
  fi
fi

if [ $pytorch_only = 0 ]; then
# ---- build
if ls .deps/*.deb >/dev/null 2>&1 && [ -z "${LADDER_DEPS_PREFIX:-}" ]; then
  mkdir -p /tmp/ladder-deps  # headers for a machine without apt access, as gpu_check.sh does
  for deb in .deps/*.deb; do dpkg -x "$deb" /tmp/ladder-deps; done
  export LADDER_DEPS_PREFIX=/tmp/ladder-deps/usr
fi
bash scripts/install_dependencies.sh
preset=${LADDER_PRESET:-native}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  preset=${LADDER_PRESET:-ci}  # "native" needs a GPU to detect; the chapters will say there is none
fi
extra_configure=()
[ -n "${LADDER_DEPS_PREFIX:-}" ] && extra_configure+=("-DCMAKE_PREFIX_PATH=$LADDER_DEPS_PREFIX")
cmake --preset "$preset" "${extra_configure[@]}" >/dev/null
# A build directory kept from an earlier call recompiles what changed since (the script
# says why).
python3 scripts/refresh_source_times.py "build/$preset"
cmake --build --preset "$preset" --target chapters -j "$(nproc)"

# ---- the chapters
chapters=()
for folder in chapters/[0-9][0-9]_*/; do
  name=$(basename "$folder")
  # 00, the CPU prologue, takes minutes per run at B = 32: its README has its measurement.
  [ "$name" = 00_cpu_reference ] && continue
  # 12 serves a trace with its own command line (no --batch, --new-tokens) and its own
  # table: its README's commands run it into results/continuous_batching/.
  [ "$name" = 12_continuous_batching ] && continue
  if [ -x "build/$preset/chapters/$name" ]; then
    chapters+=("$name")
  else
    echo "run_ladder.sh: $name has no executable (no sources yet?): skipped"
  fi
done
[ ${#chapters[@]} -gt 0 ] || error "no chapter executables in build/$preset/chapters"

run_chapter() {  # name, label, chapter flags...
  local name=$1 label=$2
  shift 2
  echo
  echo "=== [$index/$count] $name: $label, $runs timed runs (at $(elapsed))"
  local status=0
  "build/$preset/chapters/$name" "$@" --runs "$runs" "${chapter_flags[@]}" || status=$?
  if [ $status -eq 3 ]; then
    exit 3  # no CUDA device: the chapter has said so in one line
  elif [ $status -ne 0 ]; then
    echo "run_ladder.sh: $name failed (exit $status): stopping" >&2
    exit $status
  fi
}
if [ $sizes_only = 0 ]; then
rm -f "$staging"/[0-9][0-9]_*.json "$staging"/pytorch_*.json "$staging"/run.json \
  "$staging"/summary.md
index=0
count=${#chapters[@]}
for name in "${chapters[@]}"; do
  index=$((index + 1))
  run_chapter "$name" "B = 32, N = $main_tokens" --batch 32 --new-tokens "$main_tokens" \
    --json "$staging/$name.json"
  run_chapter "$name" "batch sweep B = 1, 8, 64, N = 100" --batch 1,8,64 --new-tokens 100 \
    --json "$staging/$name.sweep.json"
  # Chapter 09 has a goal with --tf32 too (its products on the tensor cores): the same
  # workload again into NN_name.tf32*.json (the tables show it as its own "tf32" row).
  if [ "$name" = 09_decode_matmuls ]; then
    run_chapter "$name" "--tf32, B = 32, N = $main_tokens" --tf32 --batch 32 \
      --new-tokens "$main_tokens" --json "$staging/$name.tf32.json"
    run_chapter "$name" "--tf32, batch sweep B = 1, 8, 64, N = 100" --tf32 --batch 1,8,64 \
      --new-tokens 100 --json "$staging/$name.tf32.sweep.json"
  fi
done
fi

# ---- GPT-2's larger sizes: the last rungs (07 on) at B = 1 and 32, N = 100
if [ $sizes = 1 ]; then
  size_chapters=()
  for name in "${chapters[@]}"; do
    if [ "$((10#${name%%_*}))" -ge 7 ]; then size_chapters+=("$name"); fi
  done
  for model in $size_models; do
    mkdir -p "$staging/sizes/$model"
    rm -f "$staging/sizes/$model"/[0-9][0-9]_*.json
    index=0
    count=${#size_chapters[@]}
    for name in "${size_chapters[@]}"; do
      index=$((index + 1))
      run_chapter "$name" "GPT-2 $model, B = 1 and 32, N = 100" --model "$model" --batch 1,32 \
        --new-tokens 100 --json "$staging/sizes/$model/$name.json"
    done
  done
fi

# ---- the run
if [ $sizes_only = 0 ]; then
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/\1 (\2)/p' || true)
RUN_GPU=${gpu%%, *} RUN_DRIVER=${gpu##*, } RUN_CUDA=$cuda RUN_COMMIT=$commit RUN_DIRTY=$dirty \
RUN_PRESET=$preset RUN_RUNS=$runs RUN_DATE=$(date -u +"%Y-%m-%d %H:%M UTC") \
python3 - "$staging" <<'EOF'
import json, os, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
bandwidths = [json.loads(path.read_text()).get("copy_bandwidth_bytes_per_s", 0)
              for path in sorted(out.glob("[0-9][0-9]_*.json"))]
run = {
    "date": os.environ["RUN_DATE"],
    "gpu": os.environ["RUN_GPU"] or None,
    "driver": os.environ["RUN_DRIVER"] or None,
    "cuda": os.environ["RUN_CUDA"] or None,
    "git_commit": os.environ["RUN_COMMIT"],
    "git_dirty": {"true": True, "false": False}.get(os.environ["RUN_DIRTY"]),  # None: unknown
    "copy_bandwidth_bytes_per_s": statistics.median(bandwidths) if bandwidths else None,
    "preset": os.environ["RUN_PRESET"],
    "timed_runs": int(os.environ["RUN_RUNS"]),
}
(out / "run.json").write_text(json.dumps(run, indent=2) + "\n")
EOF
fi
fi

# ---- PyTorch side by side
if [ $pytorch = 1 ]; then
  if why=$(python3 -c "import torch, transformers" 2>&1); then
    pytorch_flags=(--out "$staging" --new-tokens "$main_tokens" --runs "$pytorch_runs"
                   --naive-runs "$pytorch_runs")
    read -r -a extra_pytorch <<< "${LADDER_PYTORCH_FLAGS:-}"
    echo
    echo "=== PyTorch: scripts/pytorch_baseline.py ${pytorch_flags[*]} ${extra_pytorch[*]} (at $(elapsed))"
    if [ $sizes_only = 0 ]; then
      python3 scripts/pytorch_baseline.py "${pytorch_flags[@]}" "${extra_pytorch[@]}" ||
        echo "run_ladder.sh: scripts/pytorch_baseline.py failed (exit $?): the PyTorch rows may be missing" >&2
    fi
    if [ $sizes_only = 0 ] && [ "${LADDER_PYTORCH_SWEEP:-0}" = 1 ]; then
      # The compiled anchors ran their batch sweep above (--sweep-batch): not again here.
      python3 scripts/pytorch_baseline.py --out "$staging" --batch 1,8,64 --new-tokens 100 \
        --runs "$pytorch_runs" --naive-runs "$pytorch_runs" --suffix sweep \
        --variants naive,dynamic,expandable,static,compile,pingpong "${extra_pytorch[@]}" ||
        echo "run_ladder.sh: the PyTorch batch sweep failed (exit $?)" >&2
    fi
    if [ $sizes = 1 ]; then
      # The compiled anchors at the larger sizes, beside the chapters' rows of those sizes.
      for model in $size_models; do
        mkdir -p "$staging/sizes/$model"
        echo
        echo "=== PyTorch: the compiled anchors, GPT-2 $model, B = 1 and 32, N = 100 (at $(elapsed))"
        python3 scripts/pytorch_baseline.py --out "$staging/sizes/$model" --model "$model" \
          --variants hf_static_compiled,static_step_compiled --precision "$size_precisions" \
          --batch 1,32 --new-tokens 100 --sweep-batch none --runs "$pytorch_runs" \
          --naive-runs "$pytorch_runs" "${extra_pytorch[@]}" ||
          echo "run_ladder.sh: the PyTorch anchors at GPT-2 $model failed (exit $?)" >&2
      done
    fi
  else
    echo "run_ladder.sh: PyTorch rows skipped: python3 cannot import torch and transformers ($(echo "$why" | tail -1))"
  fi
fi

# ---- the run has completed: its folder replaces $out
if [ -d "$out" ]; then mv "$out" "$previous"; fi
mv "$staging" "$out"
replaced=1
rm -rf "$previous"

# ---- the table
render_flags=()
[ $quick = 1 ] && render_flags+=(--no-docs)
python3 scripts/render_results.py "$out" "${render_flags[@]}"
# The pages' computed tables quote results/latest's bandwidth and floors: a new run there
# brings them along.
if [ $quick = 0 ] && [ "$out" -ef results/latest ]; then
  python3 scripts/render_computed_tables.py
fi
echo
echo "==== summary ($out/summary.md; the job took $(elapsed))"
cat "$out/summary.md"
