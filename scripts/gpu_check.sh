#!/usr/bin/env bash
# scripts/gpu_check.sh - proves the GPU work on a machine with an NVIDIA GPU, in one call.
#
#   bash scripts/gpu_check.sh [STAGE ...]      (default: test hf bench)
#
# Stages, run in this order:
#   golden    regenerate tests/data/golden_model with Hugging Face transformers (needs torch)
#   test      build with all cores and run every test, GPU tests included
#   hf        full-size random GPT-2 small from transformers: every chapter's greedy tokens
#             must equal Hugging Face's (needs torch and transformers)
#   serving   chapter 12 on its own trace on full-size random GPT-2 small, all at once and at
#             200 requests/s: every request's tokens against chapter 07's for that prompt
#             (scripts/check_serving_trace.py; makes the weights as hf does)
#   sanitize  compute-sanitizer memcheck and racecheck on a short run of every GPU chapter
#             (LADDER_SANITIZE_CHAPTERS="07 08" limits it to those), and racecheck on the
#             decode-matmul and bf16 kernel tests, one test case at a time (cases that run
#             chapters or a WHILE node's body left out: racecheck ends those processes;
#             the shape sweeps tagged [sweep] too, unless LADDER_SANITIZE_SWEEPS=1)
#   bench     every chapter on its default workload (B = 32; N = 100, 200, 400)
#   kernels   the kernel-level GPU tests alone ([kernels], [graphs], [decode_matmul], [bf16];
#             LADDER_GPU_TAGS="[pdl] [chapter10]" runs those tags instead): quick, before the
#             chapters' tests
#   micro     the GPU programs in bench/ (host cost per call, epilogue fusion, decode matmuls,
#             the step's chain of phases, kernel history), at B = 32 and 1 (decode_matmul
#             and step_phases once, as NAME.ball.txt); outputs kept as bench/NAME.bB.txt
#             (LADDER_MICRO_PROGRAMS="decode_matmul" runs those programs only)
#   golden_bf16  tests/data/golden_model_bf16 from Hugging Face in torch.bfloat16 (needs torch),
#             then the CPU test of the bf16 reference against it
#   profile   Nsight Compute on one step of every chapter (scripts/profile_kernels.sh)
#   product   Nsight Compute's full sections on one decode matmul of chapter 09: layer 0's
#             c_fc (its third decode_matmul_fp32 launch), or with LADDER_NCU_PRODUCT=c_attn,
#             c_proj, mlp_proj or lm_head that product, at each B of LADDER_NCU_BATCHES ("32 64"):
#             ncu_product/PRODUCT.bB.txt, its report PRODUCT.bB.ncu-rep and the per-instruction
#             source counters PRODUCT.bB.sass.csv; LADDER_NCU_CHAPTER=10: the same product of chapter 10 (its
#             decode_matmul_bf16 launches), into ncu_product/bf16_PRODUCT.bB.*
#   persistent  chapter 11 (one persistent kernel): its GPU tests ([persistent]: equal to
#             chapter 10 bit for bit, repeats, the watchdog), then chapters 10 and 11 side
#             by side at B = 1, 8, 32, 64 (N = 100) and B = 32 at N = 400, one run each
#             process, the tables and JSON under persistent/ (LADDER_PERSISTENT_RUNS, 5),
#             and one step's timeline at B = 1 and 32 drawn (persistent/timeline.bB.svg,
#             and its layer 5 alone, timeline.bB.layer5.svg: chapter 11's picture), packed
#             as persistent.tar.gz
#   ladder    the main job without PyTorch (scripts/run_ladder.sh --no-pytorch; LADDER_RUNS),
#             into $OUT/ladder.tar.gz (its results/latest to commit, with LADDER_COMMIT set)
#   pytorch   scripts/pytorch_baseline.py at N = 100, 200, 400 into the same results
#             (LADDER_PYTORCH_FLAGS, e.g. "--precision bf16 --variants static,compile")
#             With LADDER_MAIN_JOB_DIR=build/main_job, `ladder pytorch` gathers the main
#             job there across calls of one warm machine: the same command again skips
#             what an earlier call finished (the chapters' run, each finished variant)
# Logs go to $OUT (or ./gpu_check_out); a short summary is printed last.
# A time limit in seconds for the whole run (the environment variable read below) keeps
# it under a machine's wall-clock limit: each command gets what is left, and what
# finished is packed all the same.
# If ./.deps holds catch2 and nlohmann-json .deb files (for a machine without apt
# access), they are unpacked and used.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=${OUT:-$root/gpu_check_out}
mkdir -p "$out/logs"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(test hf bench)
summary=()
note() { summary+=("[${SECONDS} s] $1"); echo "== [${SECONDS} s] $1"; }  # seconds since the start
wants() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
# The time limit S (seconds from this script's start; unset: no limit): every long
# command runs under `timeout` for what is left of S less LADDER_TIME_RESERVE (20 s), and
# once nothing is left it does not start, so a run that an outer time limit would cut
# still ends here and packs what finished (the archives below). A command cut or not
# started exits 124, which its stage reports as a failure; the summary names the limit.
limited() {
  if [ -z "${LADDER_TIME_LIMIT:-}" ]; then "$@"; return; fi
  local left=$(( LADDER_TIME_LIMIT - ${LADDER_TIME_RESERVE:-20} - SECONDS ))
  if [ "$left" -le 0 ]; then
    echo "gpu_check.sh: not started, LADDER_TIME_LIMIT=$LADDER_TIME_LIMIT s reached: $1" >&2
    time_limit_reached=1
    return 124
  fi
  local status=0
  timeout -k 5 "$left" "$@" || status=$?
  [ $status -eq 124 ] || [ $status -eq 137 ] && [ $(( LADDER_TIME_LIMIT - ${LADDER_TIME_RESERVE:-20} - SECONDS )) -le 0 ] &&
    time_limit_reached=1
  return $status
}
time_limit_reached=0
# first_cmake_error LOG: the text of the first "CMake Error" in a configure log, on one
# line, and where the package is Debian's catch2 or nlohmann-json3-dev, how to bring it to
# a machine without apt access (such as a GPU machine whose catch2 is 3.x).
first_cmake_error() {
  local message
  message=$(awk '/CMake Error/ { found = 1; next }
                 found && NF { printf "%s ", $0; lines++ }
                 found && lines && !NF { exit }' "$1" | tr -s ' \t' ' ' | sed 's/^ *//; s/ *$//' | cut -c1-240)
  [ -n "$message" ] || message="no CMake Error in the log"
  case $message in
    *Catch2* | *nlohmann*)
      message+="; Debian's catch2 2.13 and nlohmann-json3-dev are needed: apt-get install them, or put their .deb files in .deps/ (apt-get download catch2 nlohmann-json3-dev) for this script to unpack" ;;
  esac
  echo "$message"
}

if ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/ladder-deps
  for deb in .deps/*.deb; do dpkg -x "$deb" /tmp/ladder-deps; done
  export LADDER_DEPS_PREFIX=/tmp/ladder-deps/usr
fi
export LADDER_PRESET=${LADDER_PRESET:-native}
build=$root/build/$LADDER_PRESET
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
  > "$out/logs/nvidia-smi.txt" 2>&1
note "GPU: $(sed -n 2p "$out/logs/nvidia-smi.txt")"

if wants golden; then
  if PYTHONUNBUFFERED=1 limited python3 scripts/make_golden_model.py > "$out/logs/golden.log" 2>&1; then
    tar -czf "$out/golden_model.tar.gz" -C tests/data golden_model
    note "golden: regenerated ($(du -sh tests/data/golden_model | cut -f1))"
  else
    note "golden: FAILED (logs/golden.log)"; tail -20 "$out/logs/golden.log"
  fi
fi

if wants test || wants persistent || wants kernels || wants hf || wants serving || wants sanitize || wants bench || wants micro || wants golden_bf16 || wants profile || wants product || wants ladder; then
  start=$(date +%s)
  extra=()
  [ -n "${LADDER_DEPS_PREFIX:-}" ] && extra+=("-DCMAKE_PREFIX_PATH=$LADDER_DEPS_PREFIX")
  if ! cmake --preset "$LADDER_PRESET" "${extra[@]}" > "$out/logs/configure.log" 2>&1; then
    # The summary names CMake's first error, so a failed call says why in its last lines.
    note "build: FAILED to configure (logs/configure.log): $(first_cmake_error "$out/logs/configure.log")"
    tail -n 40 "$out/logs/configure.log"
    printf '%s\n' "${summary[@]}" > "$out/summary.txt"; exit 1
  # The build directory outlives the call on a warm machine, the tree does not: what
  # changed since its last build is marked newer, so ninja rebuilds it
  # (scripts/refresh_source_times.py says why; the script tests' stand-in trees, which
  # hold gpu_check.sh alone, skip it).
  elif [ -f scripts/refresh_source_times.py ] &&
       ! python3 scripts/refresh_source_times.py "$build" > "$out/logs/build.log" 2>&1; then
    note "build: FAILED to compare the sources with the last build's (logs/build.log)"
    tail -n 5 "$out/logs/build.log"
    printf '%s\n' "${summary[@]}" > "$out/summary.txt"; exit 1
  elif ! limited cmake --build --preset "$LADDER_PRESET" -j "$(nproc)" >> "$out/logs/build.log" 2>&1; then
    note "build: FAILED (logs/build.log)"; tail -n 40 "$out/logs/build.log"
    printf '%s\n' "${summary[@]}" > "$out/summary.txt"; exit 1
  fi
  note "build: ok in $(( $(date +%s) - start )) s"
fi

if wants kernels; then
  read -ra tags <<< "${LADDER_GPU_TAGS:-[kernels] [graphs] [decode_matmul] [bf16]}"
  for tag in "${tags[@]}"; do
    name=$(echo "$tag" | tr -d '[]')
    limited timeout 300 "$build/tests/gpu_tests" "$tag" > "$out/logs/gpu_tests.$name.log" 2>&1
    note "gpu_tests $tag: exit $?, $(grep -E '^(All tests passed|test cases:)' "$out/logs/gpu_tests.$name.log" | tail -1)"
    grep -B2 -A12 -E 'FAILED|REQUIRE.*failed|CHECK.*failed' "$out/logs/gpu_tests.$name.log" | head -60
  done
fi

if wants golden_bf16; then
  if PYTHONUNBUFFERED=1 limited python3 scripts/make_golden_bf16.py > "$out/logs/golden_bf16.log" 2>&1; then
    tar -czf "$out/golden_model_bf16.tar.gz" -C tests/data golden_model_bf16
    "$build/tests/cpu_tests" "[golden_bf16]" > "$out/logs/golden_bf16_test.log" 2>&1
    note "golden bf16: made; the bf16 reference against it: exit $?, $(tail -2 "$out/logs/golden_bf16_test.log" | head -1)"
  else
    note "golden bf16: FAILED (logs/golden_bf16.log)"; tail -20 "$out/logs/golden_bf16.log"
  fi
fi

if wants test; then
  # LADDER_CTEST_JOBS=4 runs tests side by side on the one GPU (the allocator tests, which
  # read the driver's free memory, still alone: tests/CMakeLists.txt); 1 by default.
  limited ctest --test-dir "$build" --output-on-failure -j "${LADDER_CTEST_JOBS:-1}" \
    > "$out/logs/ctest.log" 2>&1
  note "tests: $(grep -E 'tests passed|tests failed' "$out/logs/ctest.log" | tail -1)"
  grep -E '\*\*\*Failed|Not Run|\*\*\*Skipped|Exception' "$out/logs/ctest.log" | head -20
fi

if wants hf; then
  hf_dir=/tmp/gpt2-small-random
  if PYTHONUNBUFFERED=1 limited python3 scripts/check_hf_gpt2_small.py "$hf_dir" > "$out/logs/hf.log" 2>&1; then
    for chapter in "$build"/chapters/[0-9][0-9]_*; do
      name=$(basename "$chapter")
      # 12 serves a trace, not a batch of prompts: gpu_tests "[batching]" holds its tokens
      # to the reference's request by request.
      [ "$name" = 12_continuous_batching ] && continue
      limited "$chapter" --weights "$hf_dir" --prompt-file "$hf_dir/prompts.txt" --batch 4 \
        --new-tokens 16 --runs 1 --warmup 0 --quiet --dump-tokens "$out/logs/$name.hf_tokens.txt" \
        --json "$out/logs/$name.hf.json" >> "$out/logs/hf.log" 2>&1
      precision=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1])).get('precision', 'fp32'))" \
        "$out/logs/$name.hf.json" 2>/dev/null || echo fp32)
      if cmp -s "$hf_dir/hf_tokens.txt" "$out/logs/$name.hf_tokens.txt"; then
        note "hf gpt2-small: $name tokens equal Hugging Face's"
      elif [ "$precision" = bf16 ]; then
        # bf16 is held to the CPU reference's bf16 mode (the tests); against fp32 it agrees
        # until a small top-2 margin flips a token, and the row follows another path after
        note "hf gpt2-small: $name (bf16) against Hugging Face's fp32: $(python3 -c "
import sys
hf = [line.split() for line in open(sys.argv[1])]
ours = [line.split() for line in open(sys.argv[2])]
same = sum(a == b for x, y in zip(hf, ours) for a, b in zip(x, y))
first = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), len(x)) for x, y in zip(hf, ours)]
print(f'{same} of {sum(map(len, hf))} tokens equal; first difference per row at step', first)
" "$hf_dir/hf_tokens.txt" "$out/logs/$name.hf_tokens.txt" 2>&1)"
      else
        note "hf gpt2-small: $name tokens DIFFER from Hugging Face's"
      fi
    done
  else
    note "hf gpt2-small: script FAILED (logs/hf.log)"; tail -20 "$out/logs/hf.log"
  fi
fi

if wants serving; then
  hf_dir=/tmp/gpt2-small-random
  if [ -f "$hf_dir/config.json" ] ||
     PYTHONUNBUFFERED=1 python3 scripts/check_hf_gpt2_small.py "$hf_dir" > "$out/logs/hf.log" 2>&1; then
    limited python3 scripts/check_serving_trace.py --build "$build" --weights "$hf_dir" --rates 0,200 \
      --out /tmp/serving_trace > "$out/logs/serving.log" 2>&1
    note "serving trace on GPT-2 small: exit $?, $(grep -c ' requests equal ' "$out/logs/serving.log") configurations compared"
    grep -E 'requests equal|first difference|not served|failed' "$out/logs/serving.log" | head -20
    cp /tmp/serving_trace/serving.*.json "$out/logs/" 2>/dev/null
  else
    note "serving trace: making GPT-2 small FAILED (logs/hf.log)"; tail -20 "$out/logs/hf.log"
  fi
fi

if wants sanitize; then
  for chapter in "$build"/chapters/[0-9][0-9]_*; do
    name=$(basename "$chapter")
    [ "$name" = 00_cpu_reference ] && continue  # no device code to check
    [ -n "${LADDER_SANITIZE_CHAPTERS:-}" ] && ! echo " $LADDER_SANITIZE_CHAPTERS " | grep -q " ${name%%_*} " && continue
    # LADDER_SANITIZE_TOOLS="memcheck racecheck synccheck" adds synccheck.
    for tool in ${LADDER_SANITIZE_TOOLS:-memcheck racecheck}; do
      new_tokens=6
      # racecheck ends the process once a WHILE node's body runs (08, 09 and 10, whose
      # generation is a graph with a WHILE node; measured on driver 580, memcheck and
      # synccheck do not): there it checks the prefill and the graph's launch with one new
      # token, and the kernels of the body below, through the tests.
      case $name in 08_* | 09_* | 10_*) [ "$tool" = racecheck ] && new_tokens=1 ;; esac
      arguments=(--batch 3 --random-prompt-length 4 --new-tokens "$new_tokens" --runs 1 --warmup 0
                 --quiet)
      # 12 serves a trace with its own command line: 12 requests on 4 slots, slots reused
      # (no WHILE node: racecheck runs all of it).
      if [ "$name" = 12_continuous_batching ]; then
        new_tokens=1-40
        arguments=(--requests 12 --prompt-lengths 1-24 --output-limits 1-40 --slots 4 --eos 192)
      fi
      # The persistent kernel's waits run hundreds of times slower under a sanitizer:
      # its watchdog gets ten minutes.
      LADDER_PERSISTENT_WATCHDOG_MS=600000 \
        limited compute-sanitizer --tool "$tool" --error-exitcode 9 "$chapter" \
        --weights tests/data/golden_model "${arguments[@]}" > "$out/logs/$name.$tool.log" 2>&1
      status=$?
      note "$tool $name (N = $new_tokens): exit $status, $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$out/logs/$name.$tool.log" | tail -1)"
    done
  done
  # The decode-matmul and bf16 kernel tests (the kernels of chapters 09 on) under racecheck,
  # one Catch test case a process, each with its own time limit and log (logs/racecheck/),
  # so that a case that ends the process or hangs hides none of the others.
  # LADDER_SANITIZE_KERNELS=0 skips them (minutes); LADDER_SANITIZE_TAGS="[pdl]" takes
  # those tags instead; LADDER_SANITIZE_TIMEOUT is each case's limit (300 s);
  # LADDER_SANITIZE_FROM=K starts at the K-th case; LADDER_SANITIZE_CASES="7 11" runs
  # those cases alone (their numbers in the listing, as the logs name them);
  # LADDER_SANITIZE_SWEEPS=1 keeps the cases tagged [sweep] (below).
  if [ "${LADDER_SANITIZE_KERNELS:-1}" != 0 ]; then
    read -ra kernel_tags <<< "${LADDER_SANITIZE_TAGS:-[decode_matmul] [bf16]}"
    limit=${LADDER_SANITIZE_TIMEOUT:-300}
    # Catch reads a comma between tags as "or" and a space as "and"; listing exits with the
    # number of cases. Cases tagged [cupti] are left out: they read what CUPTI traced, and
    # CUPTI cannot subscribe beside a sanitizer (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED).
    # Cases tagged [chapters] are left out too: they run chapters 09 and 10 as child
    # processes, which racecheck ends with SIGSEGV once a WHILE node's body runs (all six
    # [chapters][bf16] cases, exit 139); the chapters' own runs above cover them.
    # Cases tagged [sweep] run the products on many shapes for the arithmetic's sake: under
    # racecheck two of them run past 300 s. The cases "each ...
    # decode-matmul kernel, full and partial, on each way of summing splits" run every
    # kernel and summing path those sweeps run, and stay.
    exclude='~[cupti] ~[chapters] ~[sweep]'
    [ "${LADDER_SANITIZE_SWEEPS:-0}" = 1 ] && exclude='~[cupti] ~[chapters]'
    spec_list=$(printf "%s $exclude," "${kernel_tags[@]}")
    sweeps=0
    if [ "${LADDER_SANITIZE_SWEEPS:-0}" != 1 ]; then
      sweep_list=$(printf '%s[sweep] ~[cupti] ~[chapters],' "${kernel_tags[@]}")
      sweeps=$("$build/tests/gpu_tests" --list-test-names-only "${sweep_list%,}" | grep -vc '^$')
    fi
    # Cases whose graph runs the kernels in a WHILE node's body (names ending "WhileBody")
    # are left out as well: racecheck ends those processes with SIGSEGV (all four,
    # 0 hazards reported); their kernels run under racecheck in the stream and graph cases.
    mapfile -t listed < <("$build/tests/gpu_tests" --list-test-names-only "${spec_list%,}" |
                            grep -v '^$')
    cases=()
    while_body=0
    for case_name in "${listed[@]}"; do
      if [[ "$case_name" == *WhileBody ]]; then while_body=$((while_body + 1)); else cases+=("$case_name"); fi
    done
    mkdir -p "$out/logs/racecheck"
    clean=0
    failed=()
    # LADDER_SANITIZE_FROM=K starts at the K-th case listed (1-based; the earlier ones
    # counted as not run), so that a later call goes on where a time limit stopped one.
    from=${LADDER_SANITIZE_FROM:-1}
    for i in "${!cases[@]}"; do
      case_name=${cases[$i]}
      [ $((i + 1)) -lt "$from" ] && continue
      [ -n "${LADDER_SANITIZE_CASES:-}" ] && ! echo " $LADDER_SANITIZE_CASES " | grep -q " $((i + 1)) " &&
        continue
      slug=$(printf '%s' "$case_name" | tr -c 'A-Za-z0-9' _)
      [ ${#slug} -gt 60 ] && slug="${slug:0:40}-${slug: -19}"  # the end names the stage
      log=$out/logs/racecheck/$(printf '%02d' $((i + 1))).$slug.log
      # The name as a test spec: a comma, brackets, a backslash, quotes, ~ and * escaped.
      spec=$(printf '%s' "$case_name" | sed 's/[][\\,"~*]/\\&/g')
      # -k: a process that ignores the end of its time (a crash handler stuck) is killed.
      started=$SECONDS
      limited timeout -k 10 "$limit" compute-sanitizer --tool racecheck --error-exitcode 9 \
        "$build/tests/gpu_tests" --warn NoTests "$spec" > "$log" 2>&1
      status=$?
      if [ $status -eq 0 ] && grep -q '^All tests passed' "$log" &&
         grep -q 'RACECHECK SUMMARY: 0 hazards' "$log"; then
        clean=$((clean + 1))
        echo "   racecheck $((i + 1))/${#cases[@]} clean in $((SECONDS - started)) s: $case_name"
        continue
      fi
      why="exit $status"
      { [ $status -eq 124 ] || [ $status -eq 137 ]; } && why="no end within $limit s"
      grep -q "^gpu_check.sh: not started, LADDER_TIME_LIMIT" "$log" && why="not started, LADDER_TIME_LIMIT reached"
      signal=$(grep -o 'SIG[A-Z]* - [A-Za-z ()]*' "$log" | head -1)
      hazards=$(sed -n 's/.*RACECHECK SUMMARY: \([0-9]*\) hazard.*/\1/p' "$log" | tail -1)
      [ -n "$signal" ] && why="$why, $signal"
      [ -n "$hazards" ] && [ "$hazards" != 0 ] && why="$why, $hazards hazards"
      failed+=("$case_name ($why; racecheck/$(basename "$log"))")
      echo "   racecheck $((i + 1))/${#cases[@]} FAILED after $((SECONDS - started)) s: ${failed[-1]}"  # seen if the call is cut
    done
    failed_list=none
    [ ${#cases[@]} -eq 0 ] && failed_list="none listed (no test case has those tags)"
    [ ${#failed[@]} -gt 0 ] && failed_list=$(printf '%s; ' "${failed[@]}") &&
      failed_list=${failed_list%; }
    [ "$from" -gt 1 ] && note "racecheck gpu_tests: cases 1-$((from - 1)) not run (LADDER_SANITIZE_FROM=$from)"
    [ -n "${LADDER_SANITIZE_CASES:-}" ] && note "racecheck gpu_tests: only cases $LADDER_SANITIZE_CASES run (LADDER_SANITIZE_CASES)"
    note "racecheck gpu_tests ${kernel_tags[*]}: $clean of ${#cases[@]} test cases racecheck-clean ($while_body WHILE-body and $sweeps [sweep] cases left out); failed: $failed_list"
  fi
fi

if wants bench; then
  mkdir -p "$out/results"
  for chapter in "$build"/chapters/[0-9][0-9]_*; do
    name=$(basename "$chapter")
    [ "$name" = 00_cpu_reference ] && continue  # the CPU prologue: minutes per run at B = 32
    # 12 serves its default trace; LADDER_BENCH_ARGS are the batch chapters' flags.
    bench_args=${LADDER_BENCH_ARGS:-}
    [ "$name" = 12_continuous_batching ] && bench_args=
    # shellcheck disable=SC2086  # bench_args is a list of flags
    if limited "$chapter" --json "$out/results/$name.json" $bench_args > "$out/logs/$name.bench.log" 2>&1; then
      note "bench $name: ok"
    else
      note "bench $name: FAILED"; tail -5 "$out/logs/$name.bench.log"
    fi
    grep -E '^ +[0-9]+ +[0-9]+ ' "$out/logs/$name.bench.log"
  done
  tar -czf "$out/results.tar.gz" -C "$out" results && rm -rf "$out/results"
fi

if wants persistent; then
  mkdir -p "$out/persistent"
  LADDER_PERSISTENT_WATCHDOG_MS=${LADDER_PERSISTENT_WATCHDOG_MS:-5000} \
    limited timeout 400 "$build/tests/gpu_tests" "[persistent]" > "$out/logs/gpu_tests.persistent.log" 2>&1
  note "gpu_tests [persistent]: exit $?, $(grep -E '^(All tests passed|test cases:)' "$out/logs/gpu_tests.persistent.log" | tail -1)"
  grep -B2 -A12 -E 'FAILED|REQUIRE.*failed|CHECK.*failed' "$out/logs/gpu_tests.persistent.log" | head -40
  for chapter in 10_mixed_precision 11_persistent_kernel; do
    for workload in "--batch 1,8,32,64 --new-tokens 100:sweep" "--batch 32 --new-tokens 400:n400"; do
      # shellcheck disable=SC2086  # the workload is a list of flags
      LADDER_PERSISTENT_WATCHDOG_MS=${LADDER_PERSISTENT_WATCHDOG_MS:-5000} \
        limited "$build/chapters/$chapter" ${workload%%:*} --runs "${LADDER_PERSISTENT_RUNS:-5}" \
        --compact --json "$out/persistent/$chapter.${workload##*:}.json" \
        > "$out/persistent/$chapter.${workload##*:}.txt" 2>&1
      note "$chapter ${workload%%:*}: exit $?"
      cat "$out/persistent/$chapter.${workload##*:}.txt"
    done
  done
  python3 scripts/side_by_side.py "$out/persistent" 10_mixed_precision 11_persistent_kernel \
    > "$out/persistent/side_by_side.md" && cat "$out/persistent/side_by_side.md"
  # One step's timeline at B = 1 and 32, drawn (scripts/render_persistent_timeline.py).
  for batch in 1 32; do
    LADDER_PERSISTENT_TIMELINE="$out/persistent/timeline.b$batch.csv" \
      limited "$build/chapters/11_persistent_kernel" --batch "$batch" --new-tokens 100 --runs 1 \
      --warmup 1 --quiet > "$out/logs/timeline.b$batch.log" 2>&1 &&
      python3 scripts/render_persistent_timeline.py "$out/persistent/timeline.b$batch.csv" \
        "$out/persistent/timeline.b$batch.svg" "$out/persistent/timeline.b$batch.md" &&
      python3 scripts/render_persistent_timeline.py "$out/persistent/timeline.b$batch.csv" \
        "$out/persistent/timeline.b$batch.layer5.svg" /dev/null --layer 5 &&
      cat "$out/persistent/timeline.b$batch.md"
    note "timeline of one step at B = $batch: exit $?"
  done
  # One archive: a remote run may copy back only so many files.
  tar -czf "$out/persistent.tar.gz" -C "$out" persistent && rm -rf "$out/persistent"
fi

if wants micro; then
  mkdir -p "$out/bench"
  for program in "$build"/bench/*; do
    name=$(basename "$program")
    # Not GPU bench programs: batching_schedule counts on the CPU, compare_logits compares two
    # --dump-logits files, allocator_host_cost replays the allocators on the host (no --batch;
    # results/cpu/README.md runs it).
    case $name in batching_schedule|compare_logits|allocator_host_cost) continue ;; esac
    [ -n "${LADDER_MICRO_PROGRAMS:-}" ] && ! echo " $LADDER_MICRO_PROGRAMS " | grep -q " $name " && continue
    batches=${LADDER_MICRO_BATCHES:-32 1}
    # decode_matmul sweeps B = 1, 8, 32, 64 in one run; step_phases has no batch
    case $name in decode_matmul|step_phases) batches=all ;; esac
    for batch in $batches; do
      flags=(--batch "$batch"); [ "$batch" = all ] && flags=()
      if limited timeout 300 "$program" "${flags[@]}" > "$out/bench/$name.b$batch.txt" 2>&1; then
        note "micro $name --batch $batch: ok"
      else
        note "micro $name --batch $batch: FAILED"
      fi
      grep -E '^\|' "$out/bench/$name.b$batch.txt" | head -40
    done
  done
  tar -czf "$out/bench.tar.gz" -C "$out" bench && rm -rf "$out/bench"
fi

if wants ladder || wants pytorch; then
  # LADDER_MAIN_JOB_DIR=DIR (e.g. build/main_job, kept between the calls of one warm
  # machine): the main job's results gather there, not in this call's $OUT, and the same
  # command run again goes on where the last one stopped: `ladder` is skipped once DIR
  # holds its run.json, `pytorch` keeps the variant files already finished (--resume).
  # Each call packs all of DIR so far into $OUT/ladder.tar.gz.
  results=$out/ladder
  resume=()
  if [ -n "${LADDER_MAIN_JOB_DIR:-}" ]; then
    # A folder left by a run of another commit is not this run's: start it afresh.
    if [ -n "${LADDER_COMMIT:-}" ] && [ -f "$LADDER_MAIN_JOB_DIR/run.json" ] &&
       ! grep -qF "\"git_commit\": \"$LADDER_COMMIT\"" "$LADDER_MAIN_JOB_DIR/run.json"; then
      note "ladder: $LADDER_MAIN_JOB_DIR held another commit's run, emptied"
      rm -rf "$LADDER_MAIN_JOB_DIR"
    fi
    mkdir -p "$LADDER_MAIN_JOB_DIR" && results=$(cd "$LADDER_MAIN_JOB_DIR" && pwd)
    resume=(--resume)
  fi
  mkdir -p "$results"
  if wants ladder; then
    if [ ${#resume[@]} -gt 0 ] && [ -f "$results/run.json" ]; then
      note "ladder: kept from an earlier call ($LADDER_MAIN_JOB_DIR/run.json)"
    elif limited bash scripts/run_ladder.sh "$results" --no-pytorch > "$out/logs/ladder.log" 2>&1; then
      note "ladder: every chapter measured ($(grep -c '^===' "$out/logs/ladder.log") runs)"
    else
      note "ladder: FAILED (logs/ladder.log)"; tail -20 "$out/logs/ladder.log"
    fi
  fi
  if wants pytorch; then
    # shellcheck disable=SC2086  # LADDER_PYTORCH_FLAGS is a list of flags
    if limited python3 scripts/pytorch_baseline.py --out "$results" --new-tokens 100,200,400 \
        --runs "${LADDER_PYTORCH_RUNS:-3}" --naive-runs "${LADDER_PYTORCH_RUNS:-3}" \
        "${resume[@]}" ${LADDER_PYTORCH_FLAGS:-} > "$out/logs/pytorch.log" 2>&1; then
      note "pytorch: $(ls "$results"/pytorch_*.json 2>/dev/null | wc -l) variant files"
    else
      note "pytorch: FAILED (logs/pytorch.log)"; tail -20 "$out/logs/pytorch.log"
    fi
    if [ ${#resume[@]} -gt 0 ]; then
      unfinished=$(grep -L '"complete": true' "$results"/pytorch_*.json 2>/dev/null | wc -l)
      note "pytorch: $(ls "$results"/pytorch_*.json 2>/dev/null | wc -l) variant files in $LADDER_MAIN_JOB_DIR, $unfinished not finished (run the same command again)"
    fi
  fi
  [ "$results" != "$out/ladder" ] && cp -r "$results" "$out/ladder"
fi

if wants product; then
  mkdir -p "$out/ncu_product"
  # The one-token prompt's prefill runs the decode step's shapes, the products in model order:
  # per layer c_attn, c_proj, c_fc, mlp proj (launches 4 l .. 4 l + 3), then the LM head (48).
  product=${LADDER_NCU_PRODUCT:-c_fc}
  case ${LADDER_NCU_CHAPTER:-09} in
    09) ncu_chapter=09_decode_matmuls; ncu_kernels=decode_matmul_fp32; ncu_name=$product ;;
    10) ncu_chapter=10_mixed_precision; ncu_kernels=decode_matmul_bf16; ncu_name=bf16_$product ;;
    *) ncu_chapter= ; note "product: LADDER_NCU_CHAPTER=$LADDER_NCU_CHAPTER is not 09 or 10: nothing profiled" ;;
  esac
  case $product in
    c_attn) skip=0 ;;
    c_proj) skip=1 ;;
    c_fc) skip=2 ;;
    mlp_proj) skip=3 ;;
    lm_head) skip=48 ;;
    *) skip= ; note "product: LADDER_NCU_PRODUCT=$product is not c_attn, c_proj, c_fc, mlp_proj or lm_head: nothing profiled" ;;
  esac
  for batch in ${LADDER_NCU_BATCHES:-32 64}; do
    [ -n "$skip" ] && [ -n "$ncu_chapter" ] || break
    file=$out/ncu_product/$ncu_name.b$batch.txt
    report=$out/ncu_product/$ncu_name.b$batch  # .ncu-rep: opens in Nsight Compute's GUI
    # --set full: every section (shared wavefronts and bank conflicts, L2 sectors, stalls,
    # and the source counters: per SASS instruction, executions and stall samples).
    if limited ncu --set full --import-source yes -k "regex:$ncu_kernels" --launch-skip "$skip" \
           --launch-count 1 -f -o "$report" "$build/chapters/$ncu_chapter" --batch "$batch" \
           --new-tokens 2 --runs 1 --warmup 0 --quiet > "$file.log" 2>&1 &&
       ncu -i "$report.ncu-rep" --print-details all > "$file" 2>&1; then
      note "product: ncu of $ncu_name at B = $batch ($(grep -m1 -oE 'decode_matmul_(fp32|bf16)[a-z_]*kernel<[^>]*>\(.*\) \([0-9, ]+\)' "$file" | sed 's/(DecodeMatmul[A-Za-z0-9]*Arguments[^)]*) / grid /'))"
      # The same launch per SASS instruction (the chunk loop's cost, line by line).
      ncu -i "$report.ncu-rep" --page source --print-source sass --csv > "$report.sass.csv" 2>&1 ||
        note "product: the SASS source page of $ncu_name at B = $batch FAILED (ncu_product/$(basename "$report").sass.csv)"
    else
      note "product: ncu of $ncu_name at B = $batch FAILED (ncu_product/$(basename "$file").log)"; tail -5 "$file.log" "$file"
    fi
  done
fi

if wants profile; then
  # kernels per step from this call's ladder run where there was one
  [ -d "$out/ladder" ] && export LADDER_PROFILE_RESULTS=${LADDER_PROFILE_RESULTS:-$out/ladder}
  if limited bash scripts/profile_kernels.sh "$build" > "$out/logs/profile.log" 2>&1; then
    note "profile: ncu on one step of every chapter (results/ncu)"
  else
    note "profile: FAILED for some chapter (logs/profile.log)"; grep -A16 FAILED "$out/logs/profile.log"
  fi
  [ -d results/ncu ] && tar -czf "$out/ncu.tar.gz" -C results ncu
fi
[ -d "$out/ladder" ] && tar -czf "$out/ladder.tar.gz" -C "$out" ladder && rm -rf "$out/ladder"

[ "$time_limit_reached" = 1 ] &&
  note "LADDER_TIME_LIMIT=$LADDER_TIME_LIMIT s reached: the stages above that failed or are missing were cut or not started"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
printf '%s\n' "${summary[@]}" > "$out/summary.txt"
echo
echo "==== summary"
printf '%s\n' "${summary[@]}"
