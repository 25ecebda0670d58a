// common/pinned_flag.hpp - one int32 in page-locked (pinned) host memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "common/cuda_check.hpp"

namespace ladder {

/// An int32 the GPU can copy into without the host waiting. A device-to-host
/// cudaMemcpyAsync into ordinary, pageable memory returns only once the copy is done;
/// into pinned memory it is a DMA the host does not wait for: the host learns that it
/// has landed from an event recorded after it.
class PinnedFlag {
 public:
  PinnedFlag() {
    void* memory = nullptr;
    CUDA_CHECK(cudaHostAlloc(&memory, sizeof(std::int32_t), cudaHostAllocDefault));
    value_ = static_cast<std::int32_t*>(memory);
    *value_ = 0;
  }
  ~PinnedFlag() {
    if (value_ != nullptr && cudaFreeHost(value_) != cudaSuccess)
      std::fprintf(stderr, "warning: cudaFreeHost failed\n");
  }
  PinnedFlag(const PinnedFlag&) = delete;
  PinnedFlag& operator=(const PinnedFlag&) = delete;

  std::int32_t* get() const { return value_; }

 private:
  std::int32_t* value_ = nullptr;
};

}  // namespace ladder
