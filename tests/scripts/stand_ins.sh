# shellcheck shell=bash disable=SC2034  # sourced: its variables are the caller's
# tests/scripts/stand_ins.sh - what the script tests that run a repository script around
# stand-in programs share; sourced, not run.
#
# Sets `repository` (the checkout), `work` (a scratch folder, removed on exit) with
# `$work/bin` for the stand-ins (put it first on PATH), `failures` and fail MESSAGE
# (prints it and counts it); stand_in_nvidia_smi writes an nvidia-smi that names one GPU.
repository=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
failures=0
fail() { echo "FAILED: $1"; failures=$((failures + 1)); }
stand_in_nvidia_smi() {
  printf '#!/bin/sh\necho "name, driver_version"; echo "stand-in GPU, 0"\n' > "$work/bin/nvidia-smi"
  chmod +x "$work/bin/nvidia-smi"
}
