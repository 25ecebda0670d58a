// tests/support/fake_device.hpp - a pretend GPU for the allocators: memory sources that
// hand out bare addresses, never memory.
//
// Both allocators take their memory from a source (common/caching_allocator.hpp's
// SegmentSource, common/expandable_allocator.hpp's PageSource). The fakes here keep their
// books in a FakeDevice, so the CPU tests (tests/cpu/test_allocator_policy.cpp) check every
// policy decision without a GPU, and tests/bench/allocator_host_cost.cpp times the
// allocators with nothing of the driver's cost in the way. Each fake counts the calls that
// are driver or runtime calls on a GPU (FakeSourceCalls), so a replay also says which of
// them it would have made:
//   testing::FakeDevice device;
//   const auto allocator = testing::make_fake_allocator<CachingAllocator>(device);
//   void* block = allocator->allocate(bytes, testing::fake_stream(1));
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <type_traits>

#include "common/block_pool.hpp"
#include "common/caching_allocator.hpp"
#include "common/expandable_allocator.hpp"

namespace ladder::testing {

inline constexpr std::size_t gibibytes = 1024 * mebibytes;
inline constexpr std::size_t fake_page_bytes = 2 * mebibytes;

// Addresses start high and leave gaps between segments, so a block that ran past
// its segment would not land in a neighbour by accident.
inline constexpr std::uintptr_t first_fake_address = std::uintptr_t{1} << 40;
inline constexpr std::size_t gap_between_fake_segments = 64 * mebibytes;

/// Stream handles are only compared, never used, so any distinct values will do.
inline cudaStream_t fake_stream(std::uintptr_t id) {
  return reinterpret_cast<cudaStream_t>(id);  // NOLINT(performance-no-int-to-ptr)
}

inline std::uintptr_t address_of(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer);
}

/// How often an allocator called its fake source for what the real source does with a
/// driver or runtime call (named after each count). Synchronizations are counted apart,
/// in FakeDevice::synchronizations.
struct FakeSourceCalls {
  std::uint64_t capture_queries = 0;      ///< is_capturing: cudaStreamIsCapturing
  std::uint64_t memory_queries = 0;       ///< memory_info: cudaMemGetInfo
  std::uint64_t segment_allocations = 0;  ///< allocate_segment: cudaMalloc
  std::uint64_t segment_frees = 0;        ///< free_segment: cudaFree
  std::uint64_t range_reservations = 0;   ///< reserve_range: cuMemAddressReserve
  std::uint64_t range_frees = 0;          ///< free_range: cuMemAddressFree
  std::uint64_t page_mappings = 0;    ///< map_pages: cuMemCreate + cuMemMap a page, cuMemSetAccess
  std::uint64_t pages_mapped = 0;     ///< pages those calls mapped
  std::uint64_t page_unmappings = 0;  ///< unmap_pages: cuMemUnmap + cuMemRelease a page
  std::uint64_t pages_unmapped = 0;   ///< pages those calls unmapped
};

/// A pretend GPU: what the fake sources have handed out and not yet taken back. It
/// outlives the allocator, so a test can check that teardown returned everything.
struct FakeDevice {
  std::size_t total_bytes = 64 * gibibytes;
  std::size_t held_bytes = 0;
  std::deque<bool> scripted_answers;  ///< answers to the next requests; then capacity decides
  bool always_fail = false;
  int synchronizations = 0;
  std::size_t held_bytes_at_last_synchronization = 0;
  std::map<std::uintptr_t, std::size_t> segments;  ///< caching: address -> bytes
  std::map<std::uintptr_t, std::size_t> ranges;    ///< expandable: address -> bytes
  std::set<std::uintptr_t> mapped_pages;           ///< expandable: page addresses
  std::set<cudaStream_t> capturing_streams;        ///< streams capturing a CUDA graph
  FakeSourceCalls calls;

  /// Decides whether a request for `bytes` of memory succeeds, as a driver would.
  bool grant(std::size_t bytes);
  // What both fakes answer, counted.
  DeviceMemoryInfo memory_info();
  bool is_capturing(cudaStream_t stream);
  void record_synchronization();
};

class FakeSegmentSource final : public SegmentSource {
 public:
  explicit FakeSegmentSource(FakeDevice& device) : device_(device) {}

  void* allocate_segment(std::size_t bytes) override;
  void free_segment(void* address, std::size_t bytes) override;
  void synchronize() override { device_.record_synchronization(); }
  DeviceMemoryInfo memory_info() override { return device_.memory_info(); }
  bool is_capturing(cudaStream_t stream) override { return device_.is_capturing(stream); }

 private:
  FakeDevice& device_;
  std::uintptr_t next_address_ = first_fake_address;
};

class FakePageSource final : public PageSource {
 public:
  explicit FakePageSource(FakeDevice& device) : device_(device) {}

  std::size_t page_bytes() const override { return fake_page_bytes; }
  std::uintptr_t reserve_range(std::size_t bytes) override;
  void free_range(std::uintptr_t address, std::size_t bytes) override;
  bool map_pages(std::uintptr_t address, std::size_t page_count) override;
  void unmap_pages(std::uintptr_t address, std::size_t page_count) override;
  void synchronize() override { device_.record_synchronization(); }
  DeviceMemoryInfo memory_info() override { return device_.memory_info(); }
  bool is_capturing(cudaStream_t stream) override { return device_.is_capturing(stream); }

 private:
  bool inside_a_range(std::uintptr_t page_address) const;

  FakeDevice& device_;
  std::uintptr_t next_address_ = first_fake_address;
};

/// An Allocator (CachingAllocator or ExpandableAllocator) whose memory comes from `device`.
template <typename Allocator>
std::unique_ptr<Allocator> make_fake_allocator(FakeDevice& device) {
  if constexpr (std::is_same_v<Allocator, CachingAllocator>)
    return std::make_unique<CachingAllocator>(std::make_unique<FakeSegmentSource>(device));
  else
    return std::make_unique<ExpandableAllocator>(std::make_unique<FakePageSource>(device));
}

}  // namespace ladder::testing
