// tests/support/timed_allocator.cpp - the timed calls.
#include "tests/support/timed_allocator.hpp"

namespace ladder::testing {

using Clock = std::chrono::steady_clock;

void* TimedAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  const Clock::time_point start = Clock::now();
  void* pointer = timed_.allocate(bytes, stream);
  host_time_.allocate_time += Clock::now() - start;
  ++host_time_.allocate_calls;
  return pointer;
}

void TimedAllocator::deallocate(void* pointer) {
  const Clock::time_point start = Clock::now();
  timed_.deallocate(pointer);
  host_time_.deallocate_time += Clock::now() - start;
  ++host_time_.deallocate_calls;
}

void TimedAllocator::reset_peak_stats() {
  timed_.reset_peak_stats();
  host_time_ = AllocatorHostTime{};
}

}  // namespace ladder::testing
