// bench/bench_support.hpp - what the bench programs share: zero-filled device scratch
// memory, the --batch argument, and main()'s error handling (one line, exit codes as
// the chapters': 2 bad usage, 3 no CUDA device, 1 anything else).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"

namespace ladder::bench {

/// Device memory for a bench, zero-filled, freed when the object goes.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    for (void* pointer : buffers_) cudaFree(pointer);  // a destructor must not throw
  }

  /// `count` zeroed floats of device memory.
  float* floats(std::size_t count) {
    void* pointer = nullptr;
    CUDA_CHECK(cudaMalloc(&pointer, count * sizeof(float)));
    buffers_.push_back(pointer);
    CUDA_CHECK(cudaMemset(pointer, 0, count * sizeof(float)));
    return static_cast<float*>(pointer);
  }

 private:
  std::vector<void*> buffers_;
};

/// The batch size from `program [--batch B]` (32 without arguments).
/// Throws std::invalid_argument with the usage line otherwise.
inline int parse_batch(int argc, char** argv, const char* program) {
  if (argc == 1) return 32;
  if (argc == 3 && std::string(argv[1]) == "--batch") {
    char* end = nullptr;
    const long value = std::strtol(argv[2], &end, 10);
    if (end != argv[2] && *end == '\0' && value >= 1 && value <= 4096)
      return static_cast<int>(value);
  }
  throw std::invalid_argument(std::string("usage: ") + program + " [--batch B], 1 <= B <= 4096");
}

/// Runs `run` and turns what it throws into one line on stderr and an exit code.
template <typename Run>
int run_bench(const char* program, const Run& run) {
  try {
    return run();
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
    return 2;
  } catch (const NoCudaDevice& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
    return 3;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
    return 1;
  }
}

}  // namespace ladder::bench
