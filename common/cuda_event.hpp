// common/cuda_event.hpp - an owned CUDA event, and timing work on a stream with events.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <utility>

#include "common/cuda_check.hpp"

namespace ladder {

/// A CUDA event destroyed with its owner. flags: cudaEventDefault (can time), or
/// cudaEventDisableTiming for an event that only orders streams or wakes the host
/// (cheaper to record and to wait for).
class CudaEvent {
 public:
  explicit CudaEvent(unsigned int flags = cudaEventDefault) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
  }
  ~CudaEvent() {
    if (event_ != nullptr && cudaEventDestroy(event_) != cudaSuccess)
      std::fprintf(stderr, "warning: cudaEventDestroy failed\n");
  }
  CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&&) = delete;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// The GPU time of `enqueue`'s work on `stream`: runs it warmup_repeats times, then
/// timed_repeats times with an event recorded between consecutive repeats, waits for
/// the last one, and returns the median repeat in seconds. `enqueue` must only enqueue
/// work on `stream`. The repeats run back to back, so a repeat's time includes any gap
/// the host leaves between its launches (none while the host enqueues faster than the
/// GPU runs). Throws std::invalid_argument on warmup_repeats < 0 or timed_repeats < 1.
double median_stream_seconds(cudaStream_t stream, int warmup_repeats, int timed_repeats,
                             const std::function<void()>& enqueue);

}  // namespace ladder
