#!/usr/bin/env bash
# tests/scripts/test_gpu_check_build_failure.sh - scripts/gpu_check.sh stops with one clear
# line when the tree does not configure or does not build.
#
#   bash tests/scripts/test_gpu_check_build_failure.sh
#
# Runs `gpu_check.sh test` on any machine with stand-ins for nvidia-smi and cmake. Checked:
# a configure that fails the way a GPU machine with Catch2 3.x and no .deps/ does
# exits 1 with a summary that names CMake's error and how to bring Debian's
# packages, and prints the configure log's tail without an error of its own (the script
# once ran `tail -40` over two files, one missing: "tail: option used in invalid
# context"); a build that fails exits 1 with "build: FAILED (logs/build.log)" and the build
# log's tail; a build that works reports "build: ok".
set -euo pipefail
# shellcheck source=tests/scripts/stand_ins.sh
source "$(dirname "$0")/stand_ins.sh"

stand_in_nvidia_smi
cat > "$work/bin/cmake" << 'EOF_CMAKE'
#!/usr/bin/env bash
# cmake --preset P (configure) fails when CONFIGURE=fail; cmake --build fails when BUILD=fail.
if [ "$1" = --preset ]; then
  [ "${CONFIGURE:-ok}" = ok ] && exit 0
  cat << 'EOF_LOG'
-- Found nlohmann_json: /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake
CMake Error at tests/CMakeLists.txt:10 (find_package):
  Could not find a configuration file for package "Catch2" that is compatible
  with requested version "2.13".

  The following configuration files were considered but not accepted:

-- Configuring incomplete, errors occurred!
EOF_LOG
  exit 1
fi
if [ "$1" = --build ]; then
  [ "${BUILD:-ok}" = ok ] && exit 0
  echo "kernels/stand_in.cu(1): error: the stand-in build's error"
  exit 1
fi
EOF_CMAKE
# The test stage would run ctest next: a tree whose build folder is absent makes it fail
# fast, after the build step this test is about.
chmod +x "$work/bin/"*
tree=$work/tree
mkdir -p "$tree/scripts"
cp "$repository/scripts/gpu_check.sh" "$tree/scripts/"

run() {  # run NAME [VAR=VALUE ...]: gpu_check.sh test with the stand-ins; sets status
  local name=$1; shift
  status=0
  env PATH="$work/bin:$PATH" OUT="$work/$name" "$@" bash "$tree/scripts/gpu_check.sh" test \
    > "$work/$name.txt" 2>&1 || status=$?
}

run configure CONFIGURE=fail
[ "$status" -eq 1 ] || fail "a failed configure exited with $status, not 1"
grep -q 'build: FAILED to configure (logs/configure.log): Could not find a configuration file for package "Catch2" that is compatible with requested version "2.13".' \
  "$work/configure/summary.txt" || fail "the summary does not name CMake's error: $(cat "$work/configure/summary.txt")"
grep -q 'apt-get download catch2 nlohmann-json3-dev' "$work/configure/summary.txt" ||
  fail "the summary does not say how to bring Debian's packages"
grep -q 'Configuring incomplete' "$work/configure.txt" || fail "the configure log's tail is not printed"
! grep -q '^tail:' "$work/configure.txt" || fail "tail failed: $(grep '^tail:' "$work/configure.txt")"

run build BUILD=fail
[ "$status" -eq 1 ] || fail "a failed build exited with $status, not 1"
grep -q 'build: FAILED (logs/build.log)$' "$work/build/summary.txt" ||
  fail "the summary does not report the failed build: $(cat "$work/build/summary.txt")"
grep -q "the stand-in build's error" "$work/build.txt" || fail "the build log's tail is not printed"
! grep -q '^tail:' "$work/build.txt" || fail "tail failed: $(grep '^tail:' "$work/build.txt")"

run works
grep -q 'build: ok in' "$work/works/summary.txt" 2>/dev/null || grep -q 'build: ok in' "$work/works.txt" ||
  fail "a build that works is not reported as ok: $(cat "$work/works.txt")"

[ "$failures" -eq 0 ] && echo "gpu_check.sh build failures: all checks passed"
exit $(( failures > 0 ))
