// tests/cpu/test_launch_decisions.cpp - when a launcher may use a programmatic dependent
// launch or sum its splits in thread-block clusters (kernels/launch_decisions.hpp): the
// kernel's own build decides, not the device alone, and a cluster the device cannot place
// falls back to the workspace.
// Run: cpu_tests "[launch]"
#include <catch2/catch.hpp>

#include "kernels/launch_decisions.hpp"

namespace {

using ladder::DecodeLaunch;
using ladder::KernelBuild;

constexpr KernelBuild kNativeHopper{90, 90};       // sm_90 SASS from compute_90
constexpr KernelBuild kAmpereOnHopper{90, 80};     // compute_80 PTX JIT-compiled on an H100
constexpr KernelBuild kAmpere{80, 80};             // sm_80 SASS on an A100
constexpr KernelBuild kBlackwell{100, 100};        // a later architecture's own build
constexpr KernelBuild kHopperPtxOnLater{100, 90};  // compute_90 PTX JIT-compiled later on
constexpr KernelBuild kUnknown{};

}  // namespace

TEST_CASE("a programmatic launch needs the wait in the kernel's own code", "[launch]") {
  using ladder::launch_for_kernel;
  CHECK(launch_for_kernel(DecodeLaunch::kProgrammatic, kNativeHopper) ==
        DecodeLaunch::kProgrammatic);
  CHECK(launch_for_kernel(DecodeLaunch::kProgrammatic, kBlackwell) == DecodeLaunch::kProgrammatic);
  CHECK(launch_for_kernel(DecodeLaunch::kProgrammatic, kHopperPtxOnLater) ==
        DecodeLaunch::kProgrammatic);
  // The review's case: an sm_80 build on an H100 runs a 9.0 binary whose source had no
  // griddepcontrol.wait (__CUDA_ARCH__ was 800): a programmatic launch would race.
  CHECK(launch_for_kernel(DecodeLaunch::kProgrammatic, kAmpereOnHopper) ==
        DecodeLaunch::kAfterPrevious);
  CHECK(launch_for_kernel(DecodeLaunch::kProgrammatic, kAmpere) == DecodeLaunch::kAfterPrevious);
  CHECK(launch_for_kernel(DecodeLaunch::kProgrammatic, kUnknown) == DecodeLaunch::kAfterPrevious);
  // A plain launch stays plain whatever the build.
  for (const KernelBuild build : {kNativeHopper, kAmpereOnHopper, kAmpere, kBlackwell, kUnknown})
    CHECK(launch_for_kernel(DecodeLaunch::kAfterPrevious, build) == DecodeLaunch::kAfterPrevious);
}

TEST_CASE("splits are summed in clusters only where the device can place one", "[launch]") {
  using ladder::sum_splits_in_clusters;
  // splits, the largest cluster allowed, the build, room in one wave, clusters it holds.
  CHECK(sum_splits_in_clusters(6, 16, kNativeHopper, true, 20));
  CHECK(sum_splits_in_clusters(16, 16, kNativeHopper, true, 1));
  // No cluster of this size fits at once (a MIG slice, a smaller part): the workspace.
  CHECK_FALSE(sum_splits_in_clusters(6, 16, kNativeHopper, true, 0));
  CHECK_FALSE(sum_splits_in_clusters(16, 16, kNativeHopper, true, 0));
  // The kernel's code lacks the cluster sums (compute_80 PTX on an H100).
  CHECK_FALSE(sum_splits_in_clusters(6, 16, kAmpereOnHopper, true, 20));
  // One split needs no sum; more than the device's largest cluster cannot be one.
  CHECK_FALSE(sum_splits_in_clusters(1, 16, kNativeHopper, true, 20));
  CHECK_FALSE(sum_splits_in_clusters(12, 8, kNativeHopper, true, 20));
  CHECK_FALSE(sum_splits_in_clusters(6, 0, kNativeHopper, true, 20));  // before 9.0
  // A grid that fills the wave leaves clusters to a second one.
  CHECK_FALSE(sum_splits_in_clusters(6, 16, kNativeHopper, false, 20));
}
