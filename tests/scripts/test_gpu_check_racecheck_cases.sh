#!/usr/bin/env bash
# tests/scripts/test_gpu_check_racecheck_cases.sh - the sanitize stage of scripts/gpu_check.sh
# racechecks the kernel tests one test case at a time and names every case that fails.
#
#   bash tests/scripts/test_gpu_check_racecheck_cases.sh PRESET
#
# Runs `gpu_check.sh sanitize` on any machine, with stand-ins for nvidia-smi, cmake (the
# preset is built already: CTest runs after the build) and compute-sanitizer, around the
# preset's real gpu_tests, whose listing and test-spec parser pick the cases. The stand-in
# sanitizer runs nothing: it asks gpu_tests which cases its spec selects, fails when that
# is not exactly one, and otherwise answers clean, except for three cases chosen here: one
# that crashes, one that hangs past the limit, one with hazards. Checked: every case ran
# once, by its own name; the summary counts the others clean and names those three; with
# LADDER_SANITIZE_KERNELS=0 nothing runs; a case tagged [cupti] or [chapters], or one whose
# name ends "WhileBody", is never racechecked (the summary counts the WHILE-body ones); a
# case tagged [sweep] only with LADDER_SANITIZE_SWEEPS=1 (the summary counts those left out).
set -euo pipefail
preset=${1:?usage: test_gpu_check_racecheck_cases.sh PRESET}
# shellcheck source=tests/scripts/stand_ins.sh
source "$(dirname "$0")/stand_ins.sh"
gpu_tests=$repository/build/$preset/tests/gpu_tests

list_all() {  # TEST-SPEC: the names it selects (listing exits with their number)
  { "$gpu_tests" --list-test-names-only "$1" || true; } | grep -v '^$' || true
}
list_cases() { list_all "$1" | grep -v 'WhileBody$' || true; }  # less those ending "WhileBody"
kernel_spec="[decode_matmul] ~[cupti] ~[chapters] ~[sweep],[bf16] ~[cupti] ~[chapters] ~[sweep]"
mapfile -t cases < <(list_cases "$kernel_spec")
mapfile -t sweep_cases < <(list_cases "[decode_matmul][sweep] ~[cupti] ~[chapters],[bf16][sweep] ~[cupti] ~[chapters]")
[ ${#sweep_cases[@]} -ge 1 ] || { echo "FAILED: gpu_tests lists no [sweep] case"; exit 1; }
[ ${#cases[@]} -ge 3 ] || { echo "FAILED: gpu_tests lists ${#cases[@]} cases"; exit 1; }
while_body=$(list_all "$kernel_spec" | grep -c 'WhileBody$' || true)
chapters_case=$(list_all "[bf16][chapters]" | head -1)
[ -n "$chapters_case" ] && [ "$while_body" -ge 1 ] ||
  { echo "FAILED: gpu_tests lists no [bf16][chapters] case or no WhileBody case"; exit 1; }
crash=${cases[0]} hang=${cases[1]} hazards=${cases[2]}

stand_in_nvidia_smi
printf '#!/bin/sh\nexit 0\n' > "$work/bin/cmake"
cat > "$work/bin/compute-sanitizer" << 'EOF'
#!/usr/bin/env bash
# --tool racecheck --error-exitcode 9 GPU_TESTS --warn NoTests SPEC
gpu_tests=$5 spec=$8
mapfile -t matched < <("$gpu_tests" --list-test-names-only "$spec" | grep -v '^$')
[ ${#matched[@]} -eq 1 ] || { echo "spec '$spec' selects ${#matched[@]} cases"; exit 2; }
echo "${matched[0]}" >> "$RAN"
summary() { echo "========= RACECHECK SUMMARY: $1 hazards displayed ($1 errors, 0 warnings)"; }
case "${matched[0]}" in
  "$CRASH") echo "  SIGSEGV - Segmentation violation signal"; summary 0; exit 1 ;;
  "$HANG") sleep 60 ;;
  "$HAZARDS") echo "All tests passed (1 assertion in 1 test case)"; summary 2; exit 9 ;;
  *) echo "All tests passed (1 assertion in 1 test case)"; summary 0 ;;
esac
EOF
chmod +x "$work/bin/"*

run_sanitize() {  # extra environment assignment; sets `line`, the kernel tests' summary line
  rm -rf "$work/out"
  : > "$work/ran.txt"
  env PATH="$work/bin:$PATH" OUT="$work/out" LADDER_PRESET="$preset" LADDER_SANITIZE_CHAPTERS=none \
    LADDER_SANITIZE_TIMEOUT=2 RAN="$work/ran.txt" CRASH="$crash" HANG="$hang" HAZARDS="$hazards" \
    "$1" bash "$repository/scripts/gpu_check.sh" sanitize > "$work/output.txt" 2>&1 ||
    fail "gpu_check.sh sanitize ($1) exited with $?"
  line=$(grep 'racecheck gpu_tests' "$work/out/summary.txt" || true)
}

run_sanitize LADDER_SANITIZE_KERNELS=1
ran=$(sort "$work/ran.txt")
[ "$ran" = "$(printf '%s\n' "${cases[@]}" | sort)" ] ||
  fail "not every case ran once by its own name: $(diff <(echo "$ran") <(printf '%s\n' "${cases[@]}" | sort))"
case "$line" in
  *": $(( ${#cases[@]} - 3 )) of ${#cases[@]} test cases racecheck-clean ($while_body WHILE-body and ${#sweep_cases[@]} [sweep] cases left out); failed: "*) ;;
  *) fail "the summary does not count ${#cases[@]} cases, 3 failed: $line" ;;
esac
for expected in "$crash (exit 1, SIGSEGV" "$hang (no end within 2 s" "$hazards (exit 9, 2 hazards"; do
  [[ "$line" == *"$expected"* ]] || fail "the summary does not name '$expected': $line"
done

# With LADDER_SANITIZE_SWEEPS=1 the [sweep] cases run as well, each once.
run_sanitize LADDER_SANITIZE_SWEEPS=1
[ "$(sort "$work/ran.txt")" = "$(printf '%s\n' "${cases[@]}" "${sweep_cases[@]}" | sort)" ] ||
  fail "LADDER_SANITIZE_SWEEPS=1 did not run every case and every [sweep] case once"
[[ "$line" == *"(${while_body} WHILE-body and 0 [sweep] cases left out)"* ]] ||
  fail "with LADDER_SANITIZE_SWEEPS=1 the summary does not count 0 [sweep] cases left out: $line"

run_sanitize LADDER_SANITIZE_KERNELS=0
[ -z "$line" ] && [ ! -s "$work/ran.txt" ] ||
  fail "LADDER_SANITIZE_KERNELS=0 ran $(wc -l < "$work/ran.txt") cases: $line"

# [cupti] cases read what CUPTI traced, which it cannot beside a sanitizer: never racechecked.
mapfile -t graph_cases < <(list_cases "[graphs] ~[cupti] ~[chapters]")
cupti_case=$(list_all "[graphs][cupti]" | head -1)
[ -n "$cupti_case" ] && [ ${#graph_cases[@]} -ge 1 ] ||
  fail "gpu_tests lists no [graphs][cupti] case or no other [graphs] case"
run_sanitize "LADDER_SANITIZE_TAGS=[graphs]"
[ "$(sort "$work/ran.txt")" = "$(printf '%s\n' "${graph_cases[@]}" | sort)" ] ||
  fail "LADDER_SANITIZE_TAGS=[graphs] did not run exactly the [graphs] cases but '$cupti_case'"

[ $failures -eq 0 ] && echo "passed: ${#cases[@]} cases racechecked one at a time, 3 failures named; [cupti], [chapters], ${#sweep_cases[@]} [sweep] and $while_body WHILE-body cases left out"
exit $((failures > 0))
