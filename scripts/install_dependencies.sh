#!/usr/bin/env bash
# scripts/install_dependencies.sh - makes sure the build has what it needs.
#
# Needs: the CUDA 13 toolkit (nvcc on PATH), CMake >= 3.25, Ninja, g++, and Debian's
# catch2 and nlohmann-json3-dev, and cuobjdump and nvdisasm (pip's nvidia-cuda-cuobjdump
# and nvidia-cuda-nvdisasm when the toolkit has none). On Debian/Ubuntu as root, missing
# packages are installed with apt-get; otherwise the exact command to run is printed.
# With LADDER_DEPS_PREFIX set (a folder holding unpacked .deb files, as the GPU
# machine uses), the headers are taken from there instead.
set -euo pipefail

missing_packages=()
problems=()

command -v nvcc >/dev/null || problems+=("nvcc not on PATH: install the CUDA 13 toolkit and add its bin/ to PATH")
if command -v cmake >/dev/null; then
  cmake_version=$(cmake --version | head -1 | awk '{print $3}')
  if [ "$(printf '%s\n3.25\n' "$cmake_version" | sort -V | head -1)" != "3.25" ]; then
    problems+=("CMake $cmake_version is older than 3.25")
  fi
else
  missing_packages+=(cmake)
fi
command -v ninja >/dev/null || missing_packages+=(ninja-build)
command -v g++ >/dev/null || missing_packages+=(g++)

prefix=${LADDER_DEPS_PREFIX:-/usr}
[ -f "$prefix/include/catch2/catch.hpp" ] || missing_packages+=(catch2)
[ -f "$prefix/include/nlohmann/json.hpp" ] || missing_packages+=(nlohmann-json3-dev)

if [ ${#missing_packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing: ${missing_packages[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_packages[@]}" >/dev/null
  else
    problems+=("missing packages; run: sudo apt-get install ${missing_packages[*]}")
  fi
fi

# cuobjdump reads registers, spills and SASS from the built objects for the kernel
# report (scripts/kernel_report.py); some toolkit installs lack it, pip has it.
if ! command -v cuobjdump >/dev/null && ! command -v "$(dirname "$(command -v nvcc)")/cuobjdump" >/dev/null &&
   ! python3 -c "import glob, sys; sys.exit(not any(glob.glob(p + '/nvidia/cu*/bin/cuobjdump') for p in sys.path))" 2>/dev/null; then
  echo "installing: nvidia-cuda-cuobjdump (pip)"
  python3 -m pip install --quiet nvidia-cuda-cuobjdump ||
    problems+=("cuobjdump missing; run: python3 -m pip install nvidia-cuda-cuobjdump")
fi
# cuobjdump -sass runs nvdisasm, which it looks for beside itself or on PATH (without it:
# "Could not find executable file 'nvdisasm'", and the report finds no SASS).
if ! command -v nvdisasm >/dev/null && ! command -v "$(dirname "$(command -v nvcc)")/nvdisasm" >/dev/null &&
   ! python3 -c "import glob, sys; sys.exit(not any(glob.glob(p + '/nvidia/cu*/bin/nvdisasm') for p in sys.path))" 2>/dev/null; then
  echo "installing: nvidia-cuda-nvdisasm (pip)"
  python3 -m pip install --quiet nvidia-cuda-nvdisasm ||
    problems+=("nvdisasm missing; run: python3 -m pip install nvidia-cuda-nvdisasm")
fi

if [ ${#problems[@]} -gt 0 ]; then
  for problem in "${problems[@]}"; do echo "error: $problem" >&2; done
  exit 1
fi
