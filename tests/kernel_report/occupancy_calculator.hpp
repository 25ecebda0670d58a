// tests/kernel_report/occupancy_calculator.hpp - resident blocks of a kernel on one of the
// preset architectures, from the CUDA toolkit's header-only calculator (cuda_occupancy.h),
// needing no GPU: the SM limits of each architecture are written down here. Shared by the
// kernel report's two host programs (occupancy.cpp, launch_configs.cpp).
#pragma once

#include <cuda_occupancy.h>

#include <cstddef>

namespace kernel_report {

/// The SM limits of one compute capability (the CUDA C++ Programming Guide's table of
/// technical specifications per compute capability; shared memory as the runtime's
/// cudaDeviceProp reports it: per SM, the opt-in maximum per block, and the 1 KiB the
/// system reserves per block).
struct Architecture {
  int code;
  int threads_per_sm;
  std::size_t shared_per_sm;
  std::size_t shared_per_block_optin;
};

inline constexpr Architecture kArchitectures[] = {
    {80, 2048, 167936, 166912},  // A100
    {86, 1536, 102400, 101376},  // RTX 30xx, A40
    {89, 1536, 102400, 101376},  // RTX 40xx, L4, L40
    {90, 2048, 233472, 232448},  // H100, H200
};

/// The architecture of compute capability `code` (80, 86, 89 or 90), or null.
inline const Architecture* find_architecture(int code) {
  for (const Architecture& architecture : kArchitectures)
    if (architecture.code == code) return &architecture;
  return nullptr;
}

/// cuda_occupancy.h's answer for a kernel of `registers` registers a thread and
/// `static_shared` bytes of static shared memory, launched with `threads` threads and
/// `dynamic_shared` bytes of dynamic shared memory a block (its shared-memory limit raised
/// to the opt-in maximum, as the launchers do). False when the calculator rejects it.
inline bool occupancy(const Architecture& architecture, int registers, std::size_t static_shared,
                      int threads, std::size_t dynamic_shared, cudaOccResult* result) {
  cudaOccDeviceProp device;
  device.computeMajor = architecture.code / 10;
  device.computeMinor = architecture.code % 10;
  device.maxThreadsPerBlock = 1024;
  device.maxThreadsPerMultiprocessor = architecture.threads_per_sm;
  device.regsPerBlock = 65536;
  device.regsPerMultiprocessor = 65536;
  device.warpSize = 32;
  device.sharedMemPerBlock = 49152;
  device.sharedMemPerMultiprocessor = architecture.shared_per_sm;
  device.numSms = 1;  // occupancy per SM does not depend on the SM count
  device.sharedMemPerBlockOptin = architecture.shared_per_block_optin;
  device.reservedSharedMemPerBlock = 1024;
  cudaOccFuncAttributes function;
  function.maxThreadsPerBlock = 1024;
  function.numRegs = registers;
  function.sharedSizeBytes = static_shared;
  function.partitionedGCConfig = PARTITIONED_GC_OFF;
  function.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  function.maxDynamicSharedSizeBytes = architecture.shared_per_block_optin - static_shared;
  function.numBlockBarriers = 1;
  const cudaOccDeviceState state;
  return cudaOccMaxActiveBlocksPerMultiprocessor(result, &device, &function, &state, threads,
                                                 dynamic_shared) == CUDA_OCC_SUCCESS;
}

}  // namespace kernel_report
