#!/usr/bin/env bash
# A/B of an L2 prefetch in the attention kernels, as run on the H200 in session 3 (device
# call 7, on top of commit 19beb46). From the repository root:
#   git apply results/experiments/l2_prefetch/prefetch.patch
#   OUT=/some/dir bash results/experiments/l2_prefetch/ab_run.sh
# Builds with the prefetch ("after"), profiles chapters 02, 04, 05, runs the kernel tests,
# then reverts the patch, rebuilds and profiles again ("before").
set -uo pipefail
patch_file=results/experiments/l2_prefetch/prefetch.patch
prefix=()  # catch2 and nlohmann-json unpacked from ./.deps where the machine lacks them
if ls .deps/*.deb > /dev/null 2>&1; then
  mkdir -p /tmp/d && for deb in .deps/*.deb; do dpkg -x "$deb" /tmp/d; done
  prefix=(-DCMAKE_PREFIX_PATH=/tmp/d/usr)
fi
build() { cmake --preset native "${prefix[@]}" > /dev/null &&
          cmake --build --preset native -j16 > /tmp/build.log 2>&1 || { tail -20 /tmp/build.log; exit 1; }; }
profile() {
  for c in 02_kv_cache 04_static_cache 05_fused_kernels; do
    build/native/chapters/$c --new-tokens 100,400 --batch 32 --runs 3 --kernel-profile \
      > "$OUT/$1.$c.txt" 2>&1 || echo "$c failed"
    echo "== $1 $c"; grep -E "GPU busy|attention_kernel|^ +32 " "$OUT/$1.$c.txt" | cut -c1-150
  done
}
build && profile after
timeout 200 build/native/tests/gpu_tests "[kernels]" > "$OUT/kernels_tests.txt" 2>&1; echo "kernel tests rc=$?"; tail -3 "$OUT/kernels_tests.txt"
patch -R -p1 < "$patch_file" > /dev/null && build && profile before
