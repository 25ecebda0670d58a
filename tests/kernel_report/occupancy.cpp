// tests/kernel_report/occupancy.cpp - theoretical occupancy of a kernel on the preset
// architectures, from the CUDA toolkit's header-only calculator (cuda_occupancy.h).
//
//   echo "90 112 1280 256 0" | build/ci/tests/kernel_occupancy
//
// Reads one kernel per line: architecture (80, 86, 89 or 90), registers per thread,
// static shared bytes per block, threads per block, dynamic shared bytes per block.
// Writes one line per input line: resident blocks per SM, resident warps per SM, the
// SM's maximum warps, and what limits the blocks (warps, registers, shared, blocks).
// Needs no GPU: the SM limits of each architecture are written down below.
#include <cuda_occupancy.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

namespace {

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

constexpr Architecture kArchitectures[] = {
    {80, 2048, 167936, 166912},  // A100
    {86, 1536, 102400, 101376},  // RTX 30xx, A40
    {89, 1536, 102400, 101376},  // RTX 40xx, L4, L40
    {90, 2048, 233472, 232448},  // H100, H200
};

const Architecture* find_architecture(int code) {
  for (const Architecture& architecture : kArchitectures)
    if (architecture.code == code) return &architecture;
  return nullptr;
}

cudaOccDeviceProp device_of(const Architecture& architecture) {
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
  return device;
}

std::string limiter(unsigned int factors) {
  std::string names;
  const auto add = [&](unsigned int bit, const char* name) {
    if ((factors & bit) == 0) return;
    if (!names.empty()) names += "+";
    names += name;
  };
  add(OCC_LIMIT_WARPS, "warps");
  add(OCC_LIMIT_REGISTERS, "registers");
  add(OCC_LIMIT_SHARED_MEMORY, "shared");
  add(OCC_LIMIT_BLOCKS, "blocks");
  add(OCC_LIMIT_BARRIERS, "barriers");
  return names.empty() ? "-" : names;
}

}  // namespace

int main() {
  std::string line;
  int line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    std::istringstream fields(line);
    int code = 0;
    int registers = 0;
    std::size_t static_shared = 0;
    int threads = 0;
    std::size_t dynamic_shared = 0;
    if (!(fields >> code >> registers >> static_shared >> threads >> dynamic_shared)) {
      std::fprintf(stderr, "kernel_occupancy: error: line %d: expected 5 numbers\n", line_number);
      return 2;
    }
    const Architecture* architecture = find_architecture(code);
    if (architecture == nullptr) {
      std::fprintf(stderr, "kernel_occupancy: error: line %d: unknown architecture %d\n",
                   line_number, code);
      return 2;
    }
    const cudaOccDeviceProp device = device_of(*architecture);
    cudaOccFuncAttributes function;
    function.maxThreadsPerBlock = 1024;
    function.numRegs = registers;
    function.sharedSizeBytes = static_shared;
    function.partitionedGCConfig = PARTITIONED_GC_OFF;
    function.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    function.maxDynamicSharedSizeBytes = architecture->shared_per_block_optin - static_shared;
    function.numBlockBarriers = 1;
    const cudaOccDeviceState state;
    cudaOccResult result;
    if (cudaOccMaxActiveBlocksPerMultiprocessor(&result, &device, &function, &state, threads,
                                                dynamic_shared) != CUDA_OCC_SUCCESS) {
      std::fprintf(stderr, "kernel_occupancy: error: line %d: the calculator rejected it\n",
                   line_number);
      return 2;
    }
    const int warps_per_block = (threads + 31) / 32;
    std::printf("%d %d %d %s\n", result.activeBlocksPerMultiprocessor,
                result.activeBlocksPerMultiprocessor * warps_per_block,
                architecture->threads_per_sm / 32, limiter(result.limitingFactors).c_str());
  }
  return 0;
}
