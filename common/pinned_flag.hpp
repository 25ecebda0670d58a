// common/pinned_flag.hpp - page-locked (pinned) host memory: an array, and one int32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "common/cuda_check.hpp"

namespace ladder {

/// `count` values of T the GPU can copy into, and from, without the host waiting. A
/// cudaMemcpyAsync to or from ordinary, pageable memory returns only once the copy is
/// done (the host stages it itself); with pinned memory it is a DMA the host does not
/// wait for: the host learns that it has landed from an event recorded after it, and
/// must not rewrite a buffer whose copy to the device may not have run yet.
template <typename T>
class PinnedArray {
 public:
  explicit PinnedArray(std::size_t count) : count_(count) {
    void* memory = nullptr;
    CUDA_CHECK(cudaHostAlloc(&memory, count * sizeof(T), cudaHostAllocDefault));
    values_ = static_cast<T*>(memory);
    for (std::size_t i = 0; i < count; ++i) values_[i] = T{};
  }
  ~PinnedArray() {
    if (values_ != nullptr && cudaFreeHost(values_) != cudaSuccess)
      std::fprintf(stderr, "warning: cudaFreeHost failed\n");
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;

  T* get() const { return values_; }
  std::size_t size() const { return count_; }
  T& operator[](std::size_t i) const { return values_[i]; }

 private:
  std::size_t count_ = 0;
  T* values_ = nullptr;
};

/// An int32 the GPU can copy into without the host waiting (the flag a pipelined loop
/// reads a step late), 0 at first.
class PinnedFlag {
 public:
  std::int32_t* get() const { return value_.get(); }

 private:
  PinnedArray<std::int32_t> value_{1};
};

}  // namespace ladder
