// tests/support/timed_allocator.hpp - a DeviceAllocator that times another one's
// allocate() and deallocate() on the host clock.
//
// A decorator: every call goes to the allocator it wraps, unchanged; allocate() and
// deallocate() are also counted and timed with std::chrono::steady_clock, one reading
// before the call and one after, so each call's time includes about one reading of the
// clock (tests/bench/allocator_host_cost.cpp measures and prints that reading's cost).
// reset_peak_stats() restarts these counts with the wrapped allocator's:
//   TimedAllocator timed(allocator);
//   timed.reset_peak_stats();
//   ... timed.allocate(bytes, stream) ... timed.deallocate(pointer) ...
//   const AllocatorHostTime spent = timed.host_time();
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/device_allocator.hpp"

namespace ladder::testing {

/// Calls made and host time spent inside allocate() and deallocate() that returned (a
/// call that throws is neither counted nor timed).
struct AllocatorHostTime {
  std::uint64_t allocate_calls = 0;
  std::uint64_t deallocate_calls = 0;
  std::chrono::nanoseconds allocate_time{0};
  std::chrono::nanoseconds deallocate_time{0};

  std::uint64_t calls() const { return allocate_calls + deallocate_calls; }
  std::chrono::nanoseconds time() const { return allocate_time + deallocate_time; }
};

class TimedAllocator final : public DeviceAllocator {
 public:
  /// Times `timed`, which must outlive this.
  explicit TimedAllocator(DeviceAllocator& timed) : timed_(timed) {}

  void* allocate(std::size_t bytes, cudaStream_t stream) override;
  void deallocate(void* pointer) override;
  void empty_cache() override { timed_.empty_cache(); }
  AllocatorStats stats() const override { return timed_.stats(); }
  /// Also restarts host_time().
  void reset_peak_stats() override;
  std::string name() const override { return timed_.name(); }

  /// Since construction or the last reset_peak_stats().
  const AllocatorHostTime& host_time() const { return host_time_; }

 private:
  DeviceAllocator& timed_;
  AllocatorHostTime host_time_;
};

}  // namespace ladder::testing
