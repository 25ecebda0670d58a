// tests/cpu/test_timed_allocator.cpp - what tests/bench/allocator_host_cost.cpp relies on:
// the timing decorator (tests/support/timed_allocator.hpp) forwards every call unchanged
// and counts allocate() and deallocate(), and the fake sources (tests/support/fake_device.hpp)
// count the calls that are driver calls on a GPU.
// Run: cpu_tests "[allocator]"
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>

#include "common/block_pool.hpp"
#include "common/caching_allocator.hpp"
#include "common/expandable_allocator.hpp"
#include "tests/support/chapter_allocations.hpp"
#include "tests/support/fake_device.hpp"
#include "tests/support/timed_allocator.hpp"

using namespace ladder;
using namespace ladder::testing;

namespace {

// The block at `pointer` in the allocator's snapshot; fails the test when there is none.
template <typename Allocator>
Block block_at(const Allocator& allocator, const void* pointer) {
  for (const SegmentSnapshot& snapshot : allocator.memory_snapshot()) {
    for (const Block& block : snapshot.blocks)
      if (block.address == address_of(pointer)) return block;
  }
  FAIL("no block at the pointer the decorator returned");
  return {};
}

}  // namespace

TEMPLATE_TEST_CASE("the timing decorator forwards every call to the allocator it times",
                   "[allocator]", CachingAllocator, ExpandableAllocator) {
  FakeDevice device;
  const auto allocator = make_fake_allocator<TestType>(device);
  TimedAllocator timed(*allocator);
  CHECK(timed.name() == allocator->name());  // "caching" in one instance, "expandable" in the other

  // The size and the stream arrive: the block is the wrapped allocator's, on stream 2.
  void* block = timed.allocate(3 * mebibytes, fake_stream(2));
  const Block allocated = block_at(*allocator, block);
  CHECK(allocated.state == BlockState::allocated);
  CHECK(allocated.size == 3 * mebibytes);
  CHECK(allocated.stream == fake_stream(2));
  CHECK(timed.stats().allocated_bytes == 3 * mebibytes);
  CHECK(timed.stats().allocations == 1);

  // A refused request goes through as it is refused, and is not counted.
  device.capturing_streams.insert(fake_stream(3));
  CHECK_THROWS_AS(timed.allocate(4 * kibibytes, fake_stream(3)), std::logic_error);
  CHECK(timed.host_time().allocate_calls == 1);

  timed.deallocate(block);
  CHECK(allocator->stats().allocated_bytes == 0);
  CHECK(device.held_bytes > 0);  // cached
  timed.empty_cache();
  CHECK(device.held_bytes == 0);

  const AllocatorHostTime spent = timed.host_time();
  CHECK(spent.allocate_calls == 1);
  CHECK(spent.deallocate_calls == 1);
  CHECK(spent.allocate_time.count() > 0);
  CHECK(spent.time() == spent.allocate_time + spent.deallocate_time);

  // reset_peak_stats() restarts both the wrapped allocator's counters and the host time.
  timed.reset_peak_stats();
  CHECK(allocator->stats().allocations == 0);
  CHECK(allocator->stats().peak_allocated_bytes == 0);
  CHECK(timed.host_time().calls() == 0);
  CHECK(timed.host_time().time().count() == 0);
}

TEMPLATE_TEST_CASE("timed, chapter 02's generation is counted call for call and changes nothing",
                   "[allocator]", CachingAllocator, ExpandableAllocator) {
  constexpr int B = 4, N = 6;
  FakeDevice plain_device;
  FakeDevice timed_device;
  const auto plain = make_fake_allocator<TestType>(plain_device);
  const auto allocator = make_fake_allocator<TestType>(timed_device);
  TimedAllocator timed(*allocator);
  run_chapter02_generation(*plain, B, N);
  run_chapter02_generation(timed, B, N);

  // 4 buffers for the generation, then 112 a step: the hidden state, 9 a layer for 12
  // layers (ln_1, qkv, the longer keys and values, the attention and its projection;
  // ln_2, the MLP's expansion and projection), ln_f's output, the logits, the next tokens.
  const AllocatorHostTime& spent = timed.host_time();
  CHECK(spent.allocate_calls == 4 + 112 * N);
  CHECK(spent.allocate_calls == allocator->stats().allocations);
  CHECK(spent.deallocate_calls == spent.allocate_calls);
  // Each allocate() asked whether its stream captures a graph, once.
  CHECK(timed_device.calls.capture_queries == spent.allocate_calls);

  const AllocatorStats expected = plain->stats();
  const AllocatorStats actual = timed.stats();
  CHECK(actual.allocated_bytes == expected.allocated_bytes);
  CHECK(actual.reserved_bytes == expected.reserved_bytes);
  CHECK(actual.peak_allocated_bytes == expected.peak_allocated_bytes);
  CHECK(actual.peak_reserved_bytes == expected.peak_reserved_bytes);
  CHECK(actual.allocations == expected.allocations);
  CHECK(actual.driver_allocations == expected.driver_allocations);
  CHECK(actual.driver_frees == expected.driver_frees);
  CHECK(timed_device.held_bytes == plain_device.held_bytes);
}

TEST_CASE("the fake segment source counts cudaMalloc, cudaFree and the capture queries",
          "[allocator]") {
  FakeDevice device;
  const auto allocator = make_fake_allocator<CachingAllocator>(device);
  void* first = allocator->allocate(100, fake_stream(1));
  void* second = allocator->allocate(100, fake_stream(1));  // the same 2 MiB segment
  CHECK(device.calls.capture_queries == 2);
  CHECK(device.calls.segment_allocations == 1);
  CHECK(device.calls.memory_queries == 0);
  allocator->deallocate(first);
  allocator->deallocate(second);
  CHECK(device.calls.segment_frees == 0);  // cached
  allocator->empty_cache();
  CHECK(device.calls.segment_frees == 1);
  CHECK(device.synchronizations == 1);
}

TEST_CASE("the fake page source counts its ranges, mappings, pages and memory queries",
          "[allocator]") {
  FakeDevice device;
  const auto allocator = make_fake_allocator<ExpandableAllocator>(device);
  const FakeSourceCalls made = device.calls;  // the constructor asks for the device's size
  CHECK(made.memory_queries == 1);

  void* first = allocator->allocate(5 * mebibytes, fake_stream(1));  // a new segment, 3 pages
  CHECK(device.calls.range_reservations == 1);
  CHECK(device.calls.page_mappings == 1);
  CHECK(device.calls.pages_mapped == 3);
  CHECK(device.calls.memory_queries > made.memory_queries);

  // It grows in place: 2 more pages, another look at the free memory, no new range.
  const FakeSourceCalls grown_from = device.calls;
  void* second = allocator->allocate(5 * mebibytes, fake_stream(1));
  CHECK(device.calls.range_reservations == 1);
  CHECK(device.calls.page_mappings == 2);
  CHECK(device.calls.pages_mapped == 5);
  CHECK(device.calls.memory_queries == grown_from.memory_queries + 1);

  allocator->deallocate(first);
  allocator->deallocate(second);
  CHECK(device.calls.page_unmappings == 0);  // cached
  allocator->empty_cache();
  CHECK(device.calls.page_unmappings >= 1);
  CHECK(device.calls.pages_unmapped == 5);
  CHECK(device.calls.range_frees == 1);
}
