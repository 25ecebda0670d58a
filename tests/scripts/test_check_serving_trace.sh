#!/usr/bin/env bash
# tests/scripts/test_check_serving_trace.sh - scripts/check_serving_trace.py on the CPU.
#
#   bash tests/scripts/test_check_serving_trace.sh BUILD_DIR
#
# The script needs chapter 12 on a GPU; here a stand-in build tree holds what it calls:
#   bench/batching_schedule      the real program, its trace then shrunk to the golden
#                                model (ids below 380, prompts of at most 20, limits of 40);
#   chapters/12_continuous_batching  a stand-in that serves each request alone with
#                                chapter 00 (the CPU reference), the real chapters' flags,
#                                and writes chapter 12's --dump-requests format;
#   chapters/00_cpu_reference    the real one, the script's --reference.
# Then: (1) every request of every configuration must be found equal, exit 0; (2) with one
# token of one request changed in one configuration, exactly that request must be named
# and the exit code be 1; (3) without --reference the script asks for chapter 10 (the bf16
# step chapter 12 serves with), which this tree lacks: exit 2, naming it.
set -euo pipefail
build=$(cd "${1:?usage: test_check_serving_trace.sh BUILD_DIR}" && pwd)
repository=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/bench" "$work/build/chapters"
ln -s "$build/chapters/00_cpu_reference" "$work/build/chapters/00_cpu_reference"

cat > "$work/build/bench/batching_schedule" <<EOF
#!/usr/bin/env bash
"$build/bench/batching_schedule" "\$@" || exit \$?
while [ \$# -gt 0 ]; do [ "\$1" = --write-trace ] && trace=\$2; shift; done
python3 - "\$trace" <<'PY'
import sys
path = sys.argv[1]
lines = open(path).read().splitlines()
shrunk = lines[:2]
for line in lines[2:]:
    fields = line.split()
    prompt = [str(int(token) % 380) for token in fields[2:]][:20]
    shrunk.append(" ".join([fields[0], str(min(int(fields[1]), 40))] + prompt))
open(path, "w").write("\n".join(shrunk) + "\n")
PY
EOF

cat > "$work/build/chapters/12_continuous_batching" <<EOF
#!/usr/bin/env bash
while [ \$# -gt 0 ]; do
  case \$1 in --weights) weights=\$2;; --trace) trace=\$2;; --eos) eos=\$2;; --dump-requests) dump=\$2;; esac
  shift
done
python3 - "\$weights" "\$trace" "\$eos" "\$dump" "\${CORRUPT_REQUEST:--1}" <<'PY'
import subprocess, sys, tempfile
weights, trace, eos, dump, corrupt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
requests = [line.split() for line in open(trace).read().splitlines()[1:]
            if line.strip() and not line.startswith("#")]
folder = tempfile.mkdtemp()
served = []
for fields in requests:
    limit = int(fields[1])
    open(folder + "/prompt", "w").write(" ".join(fields[2:]) + "\n")
    subprocess.run(["$build/chapters/00_cpu_reference", "--weights", weights, "--prompt-file",
                    folder + "/prompt", "--batch", "1", "--new-tokens", str(limit), "--eos", str(eos),
                    "--runs", "1", "--warmup", "0", "--quiet", "--dump-tokens", folder + "/tokens"],
                   check=True, capture_output=True)
    tokens = [int(token) for token in open(folder + "/tokens").read().split()][:limit]
    served.append(tokens[:tokens.index(eos) + 1] if eos in tokens else tokens)
with open(dump, "w") as out:
    for configuration in range(3):
        for index, tokens in enumerate(served):
            if configuration == 2 and index == corrupt:
                tokens = [(tokens[0] + 1) % 380] + tokens[1:]
            out.write(" ".join(map(str, [configuration, index, index % 4] + tokens)) + "\n")
PY
EOF
chmod +x "$work/build/bench/batching_schedule" "$work/build/chapters/12_continuous_batching"

check() {  # flags for the script's run, expected exit code, a line the output must hold
  local expected=$1 line=$2 status=0
  python3 "$repository/scripts/check_serving_trace.py" --build "$work/build" \
    --weights "$repository/tests/data/golden_model" --requests 12 --rates 0,200 \
    --reference 00_cpu_reference --eos 192 --out "$work/out" > "$work/output.txt" 2>&1 || status=$?
  if [ $status -ne "$expected" ] || ! grep -qF "$line" "$work/output.txt"; then
    echo "FAILED: exit code $status (expected $expected), or no line '$line'; the script printed:"
    cat "$work/output.txt"
    exit 1
  fi
}
check 0 "rate 200, continuous: 12 of 12 requests equal 00_cpu_reference's tokens"
CORRUPT_REQUEST=3 check 1 "rate 0, continuous: 11 of 12 requests equal 00_cpu_reference's tokens"
if [ "$(grep -c 'first difference' "$work/output.txt")" -ne 2 ] ||
   ! grep -q "continuous: request 3 " "$work/output.txt"; then
  echo "FAILED: the changed request was not the one named (once per rate):"
  cat "$work/output.txt"
  exit 1
fi
status=0
python3 "$repository/scripts/check_serving_trace.py" --build "$work/build" \
  --weights "$repository/tests/data/golden_model" > "$work/output.txt" 2>&1 || status=$?
if [ $status -ne 2 ] || ! grep -qF "chapters/10_mixed_precision: not built" "$work/output.txt"; then
  echo "FAILED: the default reference is not chapter 10 (exit $status):"
  cat "$work/output.txt"
  exit 1
fi
echo "check_serving_trace.py finds every request equal, names the one that is not, and" \
  "compares with chapter 10 by default"
