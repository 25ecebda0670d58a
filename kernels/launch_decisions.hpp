// kernels/launch_decisions.hpp - when a launcher may use what only some builds and
// devices have: a programmatic dependent launch, and split sums in thread-block clusters.
//
// Both features need code that is compiled only for compute capability 9.0 on
// (griddepcontrol.wait, distributed shared memory: `#if __CUDA_ARCH__ >= 900`), and
// __CUDA_ARCH__ is the virtual architecture the PTX was compiled for. A build for sm_80
// run on an H100 JIT-compiles its compute_80 PTX: the binary is 9.0, the PTX 8.0, and
// the wait is not there. A programmatic launch of such a kernel would let it read the
// previous kernel's output before it is written. So the decision asks the kernel's own
// build (cudaFuncGetAttributes: binaryVersion and ptxVersion), not only the device.
// Pure functions of plain numbers: the CPU tests check them (tests/cpu/test_launch_decisions.cpp).
//
// Defines: KernelBuild, built_with_sm90_code, launch_for_kernel, sum_splits_in_clusters.
#pragma once

#include "kernels/launch_dependents.hpp"

namespace ladder {

/// What a kernel's loaded code was built as: 10 * major + minor, as cudaFuncAttributes
/// gives them (binaryVersion: the machine code that runs; ptxVersion: the virtual
/// architecture its source was compiled for). 0: unknown.
struct KernelBuild {
  int binary_version = 0;
  int ptx_version = 0;
};

/// Whether the kernel's code holds what `#if __CUDA_ARCH__ >= 900` compiles: both its
/// PTX and its binary are 9.0 or later (the binary alone is not enough: JIT-compiled
/// compute_80 PTX runs as a 9.0 binary without the 9.0 code).
constexpr bool built_with_sm90_code(KernelBuild build) {
  return build.binary_version >= 90 && build.ptx_version >= 90;
}

/// How a kernel is launched when its caller asks for `asked`: kProgrammatic only where
/// the kernel holds griddepcontrol.wait (built_with_sm90_code; a binary of 9.0 or later
/// also means the device runs such launches), otherwise a plain launch, which is
/// correct for any build.
constexpr DecodeLaunch launch_for_kernel(DecodeLaunch asked, KernelBuild build) {
  return asked == DecodeLaunch::kProgrammatic && built_with_sm90_code(build)
             ? DecodeLaunch::kProgrammatic
             : DecodeLaunch::kAfterPrevious;
}

/// Whether a product of `splits` splits of K sums them in thread-block clusters (one
/// cluster of `splits` blocks per column tile) rather than through the workspace:
/// 1 < splits <= cluster_limit (the largest cluster the device and kernels allow, 0
/// before 9.0), the kernel holds the cluster code (built_with_sm90_code), the grid leaves
/// room for clusters in one wave (`grid_leaves_room`), and the device can hold at least
/// one such cluster at once (`active_clusters`, cudaOccupancyMaxActiveClusters: 0 on a
/// slice of a GPU or a part whose GPCs cannot place `splits` blocks of this kernel
/// together, where a cluster launch would fail). The workspace path gives the same bits.
constexpr bool sum_splits_in_clusters(int splits, int cluster_limit, KernelBuild build,
                                      bool grid_leaves_room, int active_clusters) {
  return splits > 1 && splits <= cluster_limit && built_with_sm90_code(build) && grid_leaves_room &&
         active_clusters >= 1;
}

}  // namespace ladder
