#!/usr/bin/env bash
# results/experiments/bf16_summation_order/run.sh - how far the CPU reference's bf16 mode
# moves when only the order and width of its sums change (CPU only, about 30 s).
#
# logits.cpp writes the bf16 reference's logits of every position of the first
# teacher-forced sequence of tests/gpu/test_chapters.cpp (GPT-2 small, random weights seed
# 0, random_prompts(2, 160, ..., 77) row 0). It is built twice against the ci build's
# libladder_common.a: once as committed, once with common/reference.cpp's linear() summing
# in float instead of double (the patch is the sed below: two lines). The same rounding
# points, another valid summation: the difference is bf16's own noise at twelve layers,
# the floor under any tolerance a bf16 chapter can be held to. Output: output.txt.
#   bash results/experiments/bf16_summation_order/run.sh [BUILD_DIR]   (default build/ci)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${1:-$root/build/ci}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
sed -e 's/std::vector<double> sums(static_cast<std::size_t>(out_features));/std::vector<float> sums(static_cast<std::size_t>(out_features));/' \
    -e 's/      const double x_value = x_row\[i\];/      const float x_value = x_row[i];/' \
    "$root/common/reference.cpp" > "$scratch/reference_float_sums.cpp"
[ "$(diff "$root/common/reference.cpp" "$scratch/reference_float_sums.cpp" | grep -c '^>')" = 2 ] ||
  { echo "run.sh: the patch no longer applies to common/reference.cpp" >&2; exit 1; }
flags=(-I"$root" -O2 -std=c++17)
g++ "${flags[@]}" "$here/logits.cpp" "$build/libladder_common.a" -o "$scratch/double_sums"
g++ "${flags[@]}" "$here/logits.cpp" "$scratch/reference_float_sums.cpp" \
  "$build/libladder_common.a" -o "$scratch/float_sums"
"$scratch/double_sums" "$scratch/double.bin" >/dev/null
"$scratch/float_sums" "$scratch/float.bin" >/dev/null
python3 - "$scratch/double.bin" "$scratch/float.bin" <<'PY' | tee "$here/output.txt"
import array, statistics, sys
V = 50257
def load(path):
    values = array.array("f")
    with open(path, "rb") as handle:
        values.frombytes(handle.read())
    return [values[i:i + V] for i in range(0, len(values), V)]
double, single = load(sys.argv[1]), load(sys.argv[2])
errors = []
for d, f in zip(double, single):
    errors.append(max(abs(a - b) for a, b in zip(d, f)) / max(abs(a) for a in d))
errors.sort()
print(f"bf16 reference, sums in double against sums in float, GPT-2 small, {len(errors)} positions")
print("largest logit difference relative to the largest logit, per position:")
print(f"  median {statistics.median(errors):.4f}, p90 {errors[int(0.9 * len(errors))]:.4f}, "
      f"max {errors[-1]:.4f}")
PY
