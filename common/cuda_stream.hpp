// common/cuda_stream.hpp - an owned CUDA stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

#include "common/cuda_check.hpp"

namespace ladder {

/// A non-blocking stream (it does not synchronize with the legacy default stream),
/// destroyed with its owner.
class CudaStream {
 public:
  CudaStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaStream() {
    if (stream_ != nullptr && cudaStreamDestroy(stream_) != cudaSuccess)
      std::fprintf(stderr, "warning: cudaStreamDestroy failed\n");
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace ladder
