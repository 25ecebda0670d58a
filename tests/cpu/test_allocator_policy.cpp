// tests/cpu/test_allocator_policy.cpp - the allocators' block policy, on the CPU.
//
// Both allocators take their memory from a source (SegmentSource, PageSource);
// here the sources are fakes that hand out bare addresses, never memory
// (tests/support/fake_device.hpp), so every decision - rounding, pools, best fit,
// split, merge, per-stream caching, page mapping, the out-of-memory retry and the
// statistics - is checked without a GPU.
// Run: cpu_tests "[allocator]"
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/block_pool.hpp"
#include "common/caching_allocator.hpp"
#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/expandable_allocator.hpp"
#include "tests/support/allocator_checks.hpp"
#include "tests/support/chapter_allocations.hpp"
#include "tests/support/fake_device.hpp"

using namespace ladder;
using namespace ladder::testing;
using Catch::Matchers::Contains;

namespace {

// Most tests' starting point (a Catch fixture): a fresh 64 GiB fake device, an
// Allocator on it, and the stream to allocate on.
template <typename Allocator>
struct OnFakeDevice {
  FakeDevice device;
  std::unique_ptr<Allocator> allocator = make_fake_allocator<Allocator>(device);
  const cudaStream_t stream = fake_stream(1);

  // Starts over on a fresh device of `total_bytes`; a new allocator, since the
  // expandable one sizes its address ranges by the device when it is made.
  void use_device_of(std::size_t total_bytes) {
    allocator.reset();
    device = FakeDevice{};
    device.total_bytes = total_bytes;
    allocator = make_fake_allocator<Allocator>(device);
  }
  // Frees the blocks a test kept to its end.
  void deallocate_all(std::initializer_list<void*> pointers) {
    for (void* pointer : pointers) allocator->deallocate(pointer);
  }
};
using CachingOnFakeDevice = OnFakeDevice<CachingAllocator>;
using ExpandableOnFakeDevice = OnFakeDevice<ExpandableAllocator>;

// Adds a segment of `bytes` at first_fake_address on stream 1, one free block.
void add_free_segment(BlockPool& pool, std::size_t bytes, PoolKind pool_kind) {
  pool.add_segment(first_fake_address, bytes, fake_stream(1), pool_kind, BlockState::free);
}

// The growing KV cache of chapter 02 on the real workload's sizes: batch 32, 12
// layers with a key and a value tensor each (12 heads x 64), every step each
// tensor re-allocated one position longer and the old one freed, as Hugging
// Face's dynamic cache does with torch.cat.
AllocatorStats run_growing_kv_cache(DeviceAllocator& allocator, int max_length) {
  constexpr std::size_t bytes_per_position = std::size_t{32} * 12 * 64 * sizeof(float);
  constexpr int tensors = 12 * 2;
  const cudaStream_t stream = fake_stream(1);
  std::vector<void*> cache(tensors);
  for (void*& tensor : cache) tensor = allocator.allocate(bytes_per_position, stream);
  for (int length = 1; length <= max_length; ++length) {
    for (void*& tensor : cache) {
      void* longer = allocator.allocate(bytes_per_position * (length + 1), stream);
      allocator.deallocate(tensor);
      tensor = longer;
    }
  }
  const AllocatorStats stats = allocator.stats();
  for (void* tensor : cache) allocator.deallocate(tensor);
  return stats;
}

// The allocations of one generation of chapter 04 (static KV cache) at batch 32 with
// BOS prompts on GPT-2 small's sizes: every buffer taken at the start, sized for
// 1 + new_tokens positions, and given back at the end.
void run_static_cache_generation(DeviceAllocator& allocator, int new_tokens) {
  constexpr std::size_t B = 32, C = 768, V = 50257, layers = 12;
  const std::size_t capacity = 1 + static_cast<std::size_t>(new_tokens);
  const cudaStream_t stream = fake_stream(1);
  std::vector<void*> blocks;
  for (const std::size_t bytes :
       {B * sizeof(std::int32_t), B * sizeof(std::int32_t), sizeof(std::int32_t),
        B * new_tokens * sizeof(std::int32_t), B * sizeof(std::int32_t), 2 * sizeof(std::int32_t)})
    blocks.push_back(allocator.allocate(bytes, stream));       // prompts, flags, ids, cursor
  for (std::size_t tensor = 0; tensor < 2 * layers; ++tensor)  // keys and values, [B, H, cap, D]
    blocks.push_back(allocator.allocate(B * capacity * C * sizeof(float), stream));
  for (const std::size_t columns : {C, C, 3 * C, C, C, 4 * C, C, V})  // activations, logits
    blocks.push_back(allocator.allocate(B * columns * sizeof(float), stream));
  for (void* block : blocks) allocator.deallocate(block);
}

// One configuration as the chapter runner measures it: from an empty cache, a warm-up
// run, then a timed run whose peaks fill the table.
AllocatorStats measure_configuration(DeviceAllocator& allocator, int new_tokens) {
  start_from_empty_cache(allocator);
  run_static_cache_generation(allocator, new_tokens);  // warm-up
  allocator.reset_peak_stats();
  run_static_cache_generation(allocator, new_tokens);  // timed
  return allocator.stats();
}

}  // namespace

// ================================================================ shared policy

TEMPLATE_TEST_CASE("a configuration's memory columns do not depend on the ones run before it",
                   "[allocator]", CachingAllocator, ExpandableAllocator) {
  FakeDevice device;
  device.total_bytes = 140 * gibibytes;
  // The peaks of the last of `new_token_counts`, run in order by one allocator that
  // holds a block throughout, as a decoder holds its matmul workspace.
  const auto last_configuration = [&device](std::initializer_list<int> new_token_counts) {
    const auto allocator = make_fake_allocator<TestType>(device);
    void* workspace = allocator->allocate(32 * mebibytes, fake_stream(1));
    AllocatorStats stats;
    for (int new_tokens : new_token_counts) stats = measure_configuration(*allocator, new_tokens);
    allocator->deallocate(workspace);
    return stats;
  };
  const AllocatorStats alone = last_configuration({400});
  const AllocatorStats after_200 = last_configuration({200, 400});
  const AllocatorStats after_100_200 = last_configuration({100, 200, 400});
  INFO("peak reserved at N = 400: alone " << alone.peak_reserved_bytes << " B, after N = 200 "
                                          << after_200.peak_reserved_bytes << " B");
  CHECK(after_200.peak_reserved_bytes == alone.peak_reserved_bytes);
  CHECK(after_100_200.peak_reserved_bytes == alone.peak_reserved_bytes);
  CHECK(after_200.peak_allocated_bytes == alone.peak_allocated_bytes);
  CHECK(after_200.fragmentation() == alone.fragmentation());
  CHECK(device.held_bytes == 0);
}

TEST_CASE_METHOD(CachingOnFakeDevice, "requests round up to 512 bytes and pick a pool by size",
                 "[allocator]") {
  CHECK(round_request(0) == 512);
  CHECK(round_request(1) == 512);
  CHECK(round_request(512) == 512);
  CHECK(round_request(513) == 1024);
  CHECK(round_request(3 * mebibytes + 1) == 3 * mebibytes + 512);
  CHECK(pool_for(round_request(mebibytes)) == PoolKind::small);
  CHECK(pool_for(round_request(mebibytes + 1)) == PoolKind::large);
  CHECK_THROWS_AS(round_request(~std::size_t{0}), DeviceOutOfMemory);

  void* one_byte = allocator->allocate(1, stream);
  CHECK(allocator->stats().allocated_bytes == 512);
  void* just_over = allocator->allocate(513, stream);
  CHECK(allocator->stats().allocated_bytes == 512 + 1024);
  deallocate_all({one_byte, just_over});
  CHECK(allocator->stats().allocated_bytes == 0);
}

TEST_CASE("a large-pool rest is split off only when more than 1 MiB would remain", "[allocator]") {
  SECTION("caching: 1 MiB left stays with the block") {
    BlockPool pool(LargeBlockSplitting::remainder_above_one_mebibyte);
    add_free_segment(pool, 20 * mebibytes, PoolKind::large);
    CHECK(pool.allocate(first_fake_address, 19 * mebibytes, BlockPlacement::low_end).size ==
          20 * mebibytes);
    CHECK(pool.all_blocks().size() == 1);
  }
  SECTION("caching: 1 MiB + 512 B left is split off") {
    BlockPool pool(LargeBlockSplitting::remainder_above_one_mebibyte);
    add_free_segment(pool, 20 * mebibytes, PoolKind::large);
    const Block& block =
        pool.allocate(first_fake_address, 19 * mebibytes - 512, BlockPlacement::low_end);
    CHECK(block.size == 19 * mebibytes - 512);
    CHECK(block.address == first_fake_address);
    CHECK(pool.free_blocks().size() == 1);
    CHECK(pool.free_blocks().front().size == mebibytes + 512);
  }
  SECTION("expandable: any rest of 512 B is split off") {
    BlockPool pool(LargeBlockSplitting::any_remainder);
    add_free_segment(pool, 20 * mebibytes, PoolKind::large);
    const Block& block =
        pool.allocate(first_fake_address, 20 * mebibytes - 512, BlockPlacement::high_end);
    CHECK(block.size == 20 * mebibytes - 512);
    CHECK(block.address == first_fake_address + 512);  // carved from the high end
    CHECK(pool.free_blocks().front().size == 512);
    CHECK(pool.free_blocks().front().address == first_fake_address);
  }
  SECTION("small pool: a rest of 512 B is split off, in both allocators") {
    BlockPool pool(LargeBlockSplitting::remainder_above_one_mebibyte);
    add_free_segment(pool, 2 * mebibytes, PoolKind::small);
    CHECK(pool.allocate(first_fake_address, 2 * mebibytes - 512, BlockPlacement::low_end).size ==
          2 * mebibytes - 512);
    CHECK(pool.free_blocks().front().size == 512);
  }
}

TEST_CASE("change_state carves a range out of a block and merges like neighbours", "[allocator]") {
  BlockPool pool(LargeBlockSplitting::any_remainder);
  const std::uintptr_t base = first_fake_address;
  pool.add_segment(base, 10 * fake_page_bytes, fake_stream(1), PoolKind::large,
                   BlockState::unmapped);
  pool.change_state(base, 2 * fake_page_bytes, BlockState::free);
  pool.change_state(base + 4 * fake_page_bytes, 2 * fake_page_bytes, BlockState::free);
  CHECK(pool.all_blocks().size() == 4);  // free, unmapped, free, unmapped
  pool.change_state(base + 2 * fake_page_bytes, 2 * fake_page_bytes, BlockState::free);
  const std::vector<Block> blocks = pool.all_blocks();
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0].state == BlockState::free);
  CHECK(blocks[0].size == 6 * fake_page_bytes);
  CHECK(blocks[1].state == BlockState::unmapped);
  CHECK_THROWS_AS(pool.deallocate(base), std::invalid_argument);
}

TEST_CASE("make_device_allocator names the choices when the name is unknown", "[allocator]") {
  // No device is touched: the name is checked before any allocator is made.
  CHECK_THROWS_AS(make_device_allocator("pytorch"), std::invalid_argument);
  CHECK_THROWS_WITH(make_device_allocator("pytorch"),
                    Catch::Matchers::Contains("\"caching\" or \"expandable\""));
}

// ================================================================ caching allocator

TEST_CASE_METHOD(CachingOnFakeDevice, "caching: segment sizes follow PyTorch", "[allocator]") {
  CHECK(caching_segment_bytes(512) == 2 * mebibytes);
  CHECK(caching_segment_bytes(mebibytes) == 2 * mebibytes);
  CHECK(caching_segment_bytes(mebibytes + 512) == 20 * mebibytes);
  CHECK(caching_segment_bytes(10 * mebibytes) == 20 * mebibytes);
  CHECK(caching_segment_bytes(10 * mebibytes + 512) == 12 * mebibytes);
  CHECK(caching_segment_bytes(15 * mebibytes) == 16 * mebibytes);
  CHECK(caching_segment_bytes(200 * mebibytes + 1) == 202 * mebibytes);

  void* small = allocator->allocate(1000, stream);
  CHECK(allocator->stats().reserved_bytes == 2 * mebibytes);
  void* medium = allocator->allocate(5 * mebibytes, stream);
  CHECK(allocator->stats().reserved_bytes == 22 * mebibytes);
  void* large = allocator->allocate(15 * mebibytes + 1, stream);  // the 15 MiB left do not fit
  CHECK(allocator->stats().reserved_bytes == 38 * mebibytes);
  // A second small block comes from the same 2 MiB segment, a second medium one
  // from the same 20 MiB segment.
  void* small_again = allocator->allocate(1000, stream);
  void* medium_again = allocator->allocate(5 * mebibytes, stream);
  CHECK(allocator->stats().reserved_bytes == 38 * mebibytes);
  CHECK(allocator->stats().driver_allocations == 3);
  const std::vector<SegmentSnapshot> segments = allocator->memory_snapshot();
  REQUIRE(segments.size() == 3);
  deallocate_all({small, medium, large, small_again, medium_again});
}

TEST_CASE_METHOD(CachingOnFakeDevice, "caching: best fit takes the smallest free block that fits",
                 "[allocator]") {
  // Free blocks of 64, 32 and 128 KiB with live separators between them, and the
  // free rest of the 2 MiB segment after them.
  void* block_64k = allocator->allocate(64 * kibibytes, stream);
  void* separator_1 = allocator->allocate(512, stream);
  void* block_32k = allocator->allocate(32 * kibibytes, stream);
  void* separator_2 = allocator->allocate(512, stream);
  void* block_128k = allocator->allocate(128 * kibibytes, stream);
  void* separator_3 = allocator->allocate(512, stream);
  allocator->deallocate(block_64k);
  allocator->deallocate(block_32k);
  allocator->deallocate(block_128k);

  void* fits_32k = allocator->allocate(30 * kibibytes, stream);
  CHECK(fits_32k == block_32k);
  void* fits_128k = allocator->allocate(100 * kibibytes, stream);
  CHECK(fits_128k == block_128k);
  void* fits_64k = allocator->allocate(64 * kibibytes, stream);
  CHECK(fits_64k == block_64k);
  CHECK(allocator->stats().driver_allocations == 1);

  deallocate_all({fits_32k, fits_128k, fits_64k, separator_1, separator_2, separator_3});
}

TEST_CASE_METHOD(CachingOnFakeDevice, "caching: equal free blocks are taken lowest address first",
                 "[allocator]") {
  void* first = allocator->allocate(4 * kibibytes, stream);
  void* separator_1 = allocator->allocate(512, stream);
  void* second = allocator->allocate(4 * kibibytes, stream);
  void* separator_2 = allocator->allocate(512, stream);
  allocator->deallocate(second);
  allocator->deallocate(first);
  void* taken = allocator->allocate(4 * kibibytes, stream);
  CHECK(taken == first);
  deallocate_all({taken, separator_1, separator_2});
}

TEST_CASE_METHOD(CachingOnFakeDevice, "caching: freed neighbours merge back into the whole segment",
                 "[allocator]") {
  void* left = allocator->allocate(100 * kibibytes, stream);
  void* middle = allocator->allocate(200 * kibibytes, stream);
  void* right = allocator->allocate(300 * kibibytes, stream);
  allocator->deallocate(left);
  allocator->deallocate(right);  // merges with the free rest of the segment
  REQUIRE(allocator->memory_snapshot().front().blocks.size() == 3);
  allocator->deallocate(middle);  // joins both sides
  const std::vector<SegmentSnapshot> segments = allocator->memory_snapshot();
  REQUIRE(segments.front().blocks.size() == 1);
  CHECK(segments.front().blocks.front().size == 2 * mebibytes);
  CHECK(segments.front().blocks.front().state == BlockState::free);
  // A merged block serves a request as big as the whole segment without the driver.
  void* whole = allocator->allocate(mebibytes, stream);
  CHECK(whole == left);
  CHECK(allocator->stats().driver_allocations == 1);
  allocator->deallocate(whole);
}

TEST_CASE_METHOD(CachingOnFakeDevice,
                 "caching: a block freed on one stream is reused only on that stream",
                 "[allocator]") {
  const cudaStream_t stream_a = fake_stream(1);
  const cudaStream_t stream_b = fake_stream(2);
  void* on_a = allocator->allocate(8 * kibibytes, stream_a);
  allocator->deallocate(on_a);
  void* on_b = allocator->allocate(8 * kibibytes, stream_b);
  CHECK(on_b != on_a);
  CHECK(allocator->stats().reserved_bytes == 4 * mebibytes);  // a segment per stream
  void* on_a_again = allocator->allocate(8 * kibibytes, stream_a);
  CHECK(on_a_again == on_a);
  deallocate_all({on_b, on_a_again});
}

TEST_CASE_METHOD(CachingOnFakeDevice, "caching: statistics, peaks and counters", "[allocator]") {
  void* first = allocator->allocate(3 * mebibytes, stream);    // 20 MiB segment
  void* second = allocator->allocate(30 * mebibytes, stream);  // its own 30 MiB segment
  AllocatorStats stats = allocator->stats();
  CHECK(stats.allocated_bytes == 33 * mebibytes);
  CHECK(stats.reserved_bytes == 50 * mebibytes);
  CHECK(stats.peak_allocated_bytes == 33 * mebibytes);
  CHECK(stats.peak_reserved_bytes == 50 * mebibytes);
  CHECK(stats.allocations == 2);
  CHECK(stats.driver_allocations == 2);
  CHECK(stats.fragmentation() == Approx(17.0 / 50.0));

  allocator->deallocate(second);
  stats = allocator->stats();
  CHECK(stats.allocated_bytes == 3 * mebibytes);
  CHECK(stats.reserved_bytes == 50 * mebibytes);  // cached, not given back
  CHECK(stats.peak_allocated_bytes == 33 * mebibytes);

  allocator->reset_peak_stats();
  stats = allocator->stats();
  CHECK(stats.peak_allocated_bytes == 3 * mebibytes);
  CHECK(stats.peak_reserved_bytes == 50 * mebibytes);
  CHECK(stats.allocations == 0);
  CHECK(stats.driver_allocations == 0);

  allocator->empty_cache();  // the 30 MiB segment is entirely free; the 20 MiB one is not
  stats = allocator->stats();
  CHECK(stats.reserved_bytes == 20 * mebibytes);
  CHECK(stats.driver_frees == 1);
  CHECK(device.synchronizations >= 1);
  allocator->deallocate(first);
  allocator->empty_cache();
  CHECK(allocator->stats().reserved_bytes == 0);
  CHECK(device.held_bytes == 0);
  CHECK(AllocatorStats{}.fragmentation() == 0.0);
}

TEST_CASE_METHOD(CachingOnFakeDevice,
                 "caching: when the driver is out of memory, free segments go back and it retries",
                 "[allocator]") {
  SECTION("the device is full of cached segments") {
    use_device_of(64 * mebibytes);
    allocator->deallocate(allocator->allocate(40 * mebibytes, stream));
    void* next = allocator->allocate(50 * mebibytes, stream);  // 40 + 50 > 64: retry needed
    CHECK(allocator->stats().reserved_bytes == 50 * mebibytes);
    CHECK(allocator->stats().driver_frees == 1);
    allocator->deallocate(next);
  }
  SECTION("the driver fails once") {
    allocator->deallocate(allocator->allocate(5 * mebibytes, stream));
    void* kept = allocator->allocate(mebibytes / 2, stream);  // a live small segment stays
    device.scripted_answers = {false};
    void* next = allocator->allocate(30 * mebibytes, stream);
    CHECK(allocator->stats().reserved_bytes == 32 * mebibytes);  // 2 MiB small + 30 MiB
    CHECK(device.synchronizations == 1);
    deallocate_all({next, kept});
  }
  SECTION("the driver always fails") {
    void* kept = allocator->allocate(mebibytes / 2, stream);
    device.always_fail = true;
    const std::size_t asked = 123456789;
    const std::string message = check_out_of_memory(*allocator, asked, stream);
    CHECK_THAT(message,
               Contains("rounded to " + format_bytes(static_cast<double>(round_request(asked)))));
    CHECK_THAT(message, Contains("allocator holds 2.00 MiB reserved, 512.00 KiB allocated"));
    CHECK_THAT(message, Contains("GPU has"));
    CHECK(allocator->stats().allocated_bytes == mebibytes / 2);
    allocator->deallocate(kept);
  }
}

TEST_CASE_METHOD(CachingOnFakeDevice,
                 "caching: teardown returns every segment, and bad frees are refused",
                 "[allocator]") {
  void* pointer = allocator->allocate(50 * mebibytes, stream);
  allocator->deallocate(allocator->allocate(100, fake_stream(2)));
  allocator->deallocate(pointer);
  CHECK_THROWS_AS(allocator->deallocate(pointer), std::invalid_argument);
  CHECK_NOTHROW(allocator->deallocate(nullptr));
  CHECK(device.segments.size() == 2);
  allocator.reset();  // torn down with both segments cached
  CHECK(device.segments.empty());
  CHECK(device.held_bytes == 0);
}

// ================================================================ expandable allocator

TEST_CASE_METHOD(ExpandableOnFakeDevice,
                 "expandable: a segment reserves addresses and maps pages only as blocks need them",
                 "[allocator]") {
  use_device_of(80 * gibibytes);
  void* first = allocator->allocate(5 * mebibytes, stream);
  REQUIRE(device.ranges.size() == 1);
  CHECK(device.ranges.begin()->second == 80 * gibibytes);     // the large pool: the whole device
  CHECK(allocator->stats().reserved_bytes == 6 * mebibytes);  // 3 pages
  CHECK(device.mapped_pages.size() == 3);

  // The next block continues right behind the first: 1 MiB of the last page was
  // free, two more pages grow the segment in place.
  void* second = allocator->allocate(5 * mebibytes, stream);
  CHECK(address_of(second) == address_of(first) + 5 * mebibytes);
  CHECK(allocator->stats().reserved_bytes == 10 * mebibytes);
  CHECK(allocator->stats().driver_allocations == 5);

  // Small requests get their own, smaller range.
  void* small = allocator->allocate(1000, stream);
  REQUIRE(device.ranges.size() == 2);
  CHECK(device.ranges.count(address_of(small)) == 1);
  CHECK(device.ranges.at(address_of(small)) == 10 * gibibytes);
  CHECK(allocator->stats().reserved_bytes == 12 * mebibytes);

  // A freed block is reused without mapping anything, carved from its high end.
  allocator->deallocate(first);
  void* reuse = allocator->allocate(4 * mebibytes, stream);
  CHECK(address_of(reuse) == address_of(first) + mebibytes);
  CHECK(allocator->stats().driver_allocations == 6);
  deallocate_all({second, small, reuse});
}

TEST_CASE_METHOD(ExpandableOnFakeDevice,
                 "expandable: a request takes the lowest free block that fits, at its high end",
                 "[allocator]") {
  // Free holes of 8 MiB (low) and 5 MiB (high), live blocks around them.
  void* low_hole = allocator->allocate(8 * mebibytes, stream);
  void* between = allocator->allocate(2 * mebibytes, stream);
  void* high_hole = allocator->allocate(5 * mebibytes, stream);
  void* top = allocator->allocate(2 * mebibytes, stream);
  allocator->deallocate(low_hole);
  allocator->deallocate(high_hole);
  // 4 MiB fits both; best fit would take the 5 MiB hole, first fit takes the lower one,
  // and its high end: right below `between`.
  void* taken = allocator->allocate(4 * mebibytes, stream);
  CHECK(address_of(taken) == address_of(between) - 4 * mebibytes);
  // 6 MiB fits neither the low hole's 4 MiB rest nor the 5 MiB hole: the segment grows.
  const std::size_t reserved = allocator->stats().reserved_bytes;
  void* grown = allocator->allocate(6 * mebibytes, stream);
  CHECK(address_of(grown) == address_of(top) + 2 * mebibytes);
  CHECK(allocator->stats().reserved_bytes == reserved + 6 * mebibytes);
  // 5 MiB: the high hole, exactly (the low rest holds 4).
  void* exact = allocator->allocate(5 * mebibytes, stream);
  CHECK(exact == high_hole);
  deallocate_all({taken, between, exact, top, grown});
}

TEST_CASE_METHOD(ExpandableOnFakeDevice,
                 "expandable: the free block before the end grows into new pages", "[allocator]") {
  void* head = allocator->allocate(3 * mebibytes, stream);  // pages 0-1; 1 MiB free after
  void* tail = allocator->allocate(2 * mebibytes, stream);  // 1 MiB free + page 2
  allocator->deallocate(tail);                              // [3 MiB, 6 MiB) free
  void* bigger = allocator->allocate(5 * mebibytes, stream);
  CHECK(address_of(bigger) == address_of(head) + 3 * mebibytes);
  CHECK(allocator->stats().reserved_bytes == 8 * mebibytes);
  deallocate_all({bigger, head});
}

TEST_CASE_METHOD(ExpandableOnFakeDevice,
                 "expandable: empty_cache unmaps whole free pages, in the middle too",
                 "[allocator]") {
  void* left = allocator->allocate(6 * mebibytes, stream);
  void* middle = allocator->allocate(6 * mebibytes, stream);
  void* right = allocator->allocate(5 * mebibytes, stream);  // 1 MiB of its last page free
  CHECK(allocator->stats().reserved_bytes == 18 * mebibytes);
  allocator->deallocate(middle);
  const int synchronizations_before = device.synchronizations;
  allocator->empty_cache();
  CHECK(device.synchronizations == synchronizations_before + 1);
  CHECK(allocator->stats().reserved_bytes == 12 * mebibytes);
  CHECK(allocator->stats().driver_frees == 3);
  CHECK(device.mapped_pages.count(address_of(middle)) == 0);
  CHECK(device.mapped_pages.count(address_of(left)) == 1);

  // The hole is mapped again when a block needs it.
  void* refill = allocator->allocate(6 * mebibytes, stream);
  CHECK(refill == middle);
  CHECK(allocator->stats().reserved_bytes == 18 * mebibytes);
  check_bookkeeping(*allocator, {{address_of(left), 6 * mebibytes},
                                 {address_of(refill), 6 * mebibytes},
                                 {address_of(right), 5 * mebibytes}});

  deallocate_all({left, refill, right});
  allocator->empty_cache();
  CHECK(allocator->stats().reserved_bytes == 0);
  CHECK(device.mapped_pages.empty());
  CHECK(device.ranges.empty());  // an empty segment gives its addresses back too
}

TEST_CASE_METHOD(ExpandableOnFakeDevice, "expandable: each stream grows its own segment",
                 "[allocator]") {
  void* on_a = allocator->allocate(3 * mebibytes, stream);
  allocator->deallocate(on_a);
  void* on_b = allocator->allocate(3 * mebibytes, fake_stream(2));
  CHECK(device.ranges.size() == 2);
  CHECK(on_b != on_a);
  void* on_a_again = allocator->allocate(3 * mebibytes, stream);
  CHECK(address_of(on_a_again) == address_of(on_a) + mebibytes);  // high end of the free 4 MiB
  CHECK(device.ranges.size() == 2);
  deallocate_all({on_b, on_a_again});
}

TEST_CASE_METHOD(ExpandableOnFakeDevice,
                 "expandable: out of memory releases free pages and retries once", "[allocator]") {
  SECTION("the device is full of cached pages") {
    use_device_of(64 * mebibytes);
    allocator->deallocate(allocator->allocate(40 * mebibytes, stream));
    void* other_stream = allocator->allocate(30 * mebibytes, fake_stream(2));
    CHECK(allocator->stats().reserved_bytes == 30 * mebibytes);
    CHECK(device.ranges.size() == 1);  // stream 1's emptied segment was given back
    allocator->deallocate(other_stream);
  }
  SECTION("mapping fails once") {
    void* kept = allocator->allocate(3 * mebibytes, stream);
    device.scripted_answers = {false};
    void* next = allocator->allocate(10 * mebibytes, stream);
    CHECK(address_of(next) == address_of(kept) + 3 * mebibytes);
    CHECK(device.synchronizations == 1);
    check_bookkeeping(*allocator,
                      {{address_of(kept), 3 * mebibytes}, {address_of(next), 10 * mebibytes}});
    deallocate_all({next, kept});
  }
  SECTION("a run of two stretches maps the first, fails on the second, and undoes the first") {
    void* kept = allocator->allocate(6 * mebibytes, stream);    // [0, 6) MiB
    void* middle = allocator->allocate(6 * mebibytes, stream);  // [6, 12)
    void* cached = allocator->allocate(5 * mebibytes, stream);  // [12, 17), [17, 18) free
    allocator->deallocate(middle);
    allocator->empty_cache();       // [6, 12) unmapped
    allocator->deallocate(cached);  // [12, 18) free, mapped
    // 14 MiB from 6 MiB on: pages [6, 12) and [18, 20) are missing. The second
    // stretch fails twice (before and after the retry).
    device.scripted_answers = {true, false, false};
    CHECK_THROWS_AS(allocator->allocate(14 * mebibytes, stream), DeviceOutOfMemory);
    CHECK(device.scripted_answers.empty());
    // When the retry began, the first stretch had already been unmapped again.
    CHECK(device.held_bytes_at_last_synchronization == 12 * mebibytes);
    CHECK(allocator->stats().reserved_bytes == 6 * mebibytes);  // only the kept block's pages
    CHECK(device.held_bytes == 6 * mebibytes);
    check_bookkeeping(*allocator, {{address_of(kept), 6 * mebibytes}});
    allocator->deallocate(kept);
  }
  SECTION("mapping always fails") {
    void* kept = allocator->allocate(3 * mebibytes, stream);
    device.always_fail = true;
    const std::string message = check_out_of_memory(*allocator, 7 * mebibytes + 3, stream);
    CHECK_THAT(message, Contains("allocator holds 4.00 MiB reserved, 3.00 MiB allocated"));
    check_bookkeeping(*allocator, {{address_of(kept), 3 * mebibytes}});
    allocator->deallocate(kept);
  }
  SECTION("a request larger than the device fails at once and reserves nothing") {
    CHECK_THROWS_AS(allocator->allocate(4 * device.total_bytes, stream), DeviceOutOfMemory);
    CHECK(device.ranges.empty());
    CHECK(allocator->stats().reserved_bytes == 0);
  }
}

TEST_CASE_METHOD(ExpandableOnFakeDevice,
                 "expandable: teardown unmaps every page and frees every range", "[allocator]") {
  void* large = allocator->allocate(50 * mebibytes, stream);
  void* small = allocator->allocate(100, fake_stream(2));
  allocator->deallocate(allocator->allocate(7 * mebibytes, stream));
  deallocate_all({large, small});
  CHECK(device.ranges.size() == 2);
  CHECK(!device.mapped_pages.empty());
  allocator.reset();  // torn down with every page cached
  CHECK(device.mapped_pages.empty());
  CHECK(device.ranges.empty());
  CHECK(device.held_bytes == 0);
}

// ================================================================ both, while a graph is captured

TEMPLATE_TEST_CASE("an allocation on a stream that captures a CUDA graph is refused", "[allocator]",
                   CachingAllocator, ExpandableAllocator) {
  FakeDevice device;
  std::unique_ptr<TestType> allocator = make_fake_allocator<TestType>(device);
  const cudaStream_t capturing = fake_stream(1);
  const cudaStream_t other = fake_stream(2);
  void* before = allocator->allocate(4 * kibibytes, capturing);  // before the capture: fine
  device.capturing_streams.insert(capturing);

  // A cached block would fit, and the device has room: refused all the same, with the
  // request and the reason in the message, and nothing changes hands.
  allocator->deallocate(before);
  const AllocatorStats unchanged = allocator->stats();
  CHECK_THROWS_WITH(allocator->allocate(4 * kibibytes, capturing),
                    Contains("4.00 KiB") && Contains("capturing a CUDA graph"));
  CHECK(allocator->stats().allocations == unchanged.allocations);
  CHECK(allocator->stats().allocated_bytes == 0);

  // Another stream is not capturing, and a finished capture lifts the refusal.
  void* elsewhere = allocator->allocate(4 * kibibytes, other);
  device.capturing_streams.clear();
  void* after = allocator->allocate(4 * kibibytes, capturing);
  allocator->deallocate(elsewhere);
  allocator->deallocate(after);
  CHECK(allocator->stats().allocated_bytes == 0);
}

// ================================================================ both, under load

TEMPLATE_TEST_CASE("random allocate and free keeps blocks apart and the books straight",
                   "[allocator]", CachingAllocator, ExpandableAllocator) {
  FakeDevice device;
  device.total_bytes = 2 * gibibytes;  // small enough to run out now and then
  std::unique_ptr<TestType> allocator = make_fake_allocator<TestType>(device);

  std::mt19937_64 random(20240611);
  // Sizes spread evenly in log space, from 1 byte to 200 MiB.
  std::uniform_real_distribution<double> log_size(0.0, std::log(200.0 * mebibytes));
  std::uniform_int_distribution<int> percent(0, 99);
  std::uniform_int_distribution<std::uintptr_t> stream_id(1, 3);
  std::map<std::uintptr_t, std::size_t> live;

  const auto free_one = [&](std::size_t index) {
    auto victim = live.begin();
    std::advance(victim, static_cast<std::ptrdiff_t>(index % live.size()));
    allocator->deallocate(as_pointer(victim->first));
    live.erase(victim);
  };

  for (int operation = 0; operation < 5000; ++operation) {
    if (!live.empty() && percent(random) < 45) {
      free_one(static_cast<std::size_t>(random()));
    } else {
      const auto bytes = static_cast<std::size_t>(std::exp(log_size(random)));
      try {
        add_live_block(live, allocator->allocate(bytes, fake_stream(stream_id(random))), bytes);
      } catch (const DeviceOutOfMemory& error) {
        // Legitimate when the fake device is full, but only after everything cached
        // went back: no free block may still hold a whole page (expandable) or a
        // whole segment (caching).
        CHECK(std::string(error.what()).find(format_bytes(static_cast<double>(bytes))) !=
              std::string::npos);
        for (const SegmentSnapshot& snapshot : allocator->memory_snapshot()) {
          for (const Block& block : snapshot.blocks) {
            if (block.state != BlockState::free) continue;
            CHECK(block.size != snapshot.segment.size);
            if constexpr (std::is_same_v<TestType, ExpandableAllocator>)
              CHECK(round_up(block.address, fake_page_bytes) + fake_page_bytes > block.end());
          }
        }
        while (live.size() > 10) free_one(static_cast<std::size_t>(random()));
      }
    }
    if (percent(random) < 1) allocator->empty_cache();
    if (operation % 100 == 0) {
      const std::size_t backed = check_bookkeeping(*allocator, live);
      REQUIRE(device.held_bytes == backed);
    }
  }
  check_bookkeeping(*allocator, live);
  if constexpr (std::is_same_v<TestType, ExpandableAllocator>) {
    // Every byte of every live block has a page behind it.
    for (const auto& [address, bytes] : live) {
      for (std::uintptr_t page = address / fake_page_bytes * fake_page_bytes;
           page < address + bytes; page += fake_page_bytes)
        REQUIRE(device.mapped_pages.count(page) == 1);
    }
  }
  while (!live.empty()) free_one(0);
  CHECK(allocator->stats().allocated_bytes == 0);
  allocator->empty_cache();
  CHECK(allocator->stats().reserved_bytes == 0);
  CHECK(device.held_bytes == 0);
  allocator.reset();
  CHECK(device.segments.empty());
  CHECK(device.ranges.empty());
}

TEST_CASE("a growing KV cache fragments the caching allocator, not the expandable one",
          "[allocator]") {
  FakeDevice device;
  device.total_bytes = 140 * gibibytes;
  const AllocatorStats caching =
      run_growing_kv_cache(*make_fake_allocator<CachingAllocator>(device), 400);
  const AllocatorStats expandable =
      run_growing_kv_cache(*make_fake_allocator<ExpandableAllocator>(device), 400);
  std::printf(
      "growing KV cache, N = 400: caching %s reserved / %s allocated at peak (%.1f%% "
      "fragmentation); expandable %s / %s (%.1f%%)\n",
      format_bytes(static_cast<double>(caching.peak_reserved_bytes)).c_str(),
      format_bytes(static_cast<double>(caching.peak_allocated_bytes)).c_str(),
      100.0 * caching.fragmentation(),
      format_bytes(static_cast<double>(expandable.peak_reserved_bytes)).c_str(),
      format_bytes(static_cast<double>(expandable.peak_allocated_bytes)).c_str(),
      100.0 * expandable.fragmentation());
  CHECK(caching.fragmentation() > 0.5);
  CHECK(expandable.fragmentation() < 0.15);
  CHECK(expandable.peak_reserved_bytes <= 2 * expandable.peak_allocated_bytes);
  CHECK(device.held_bytes == 0);
}

// The replay of chapters 02 and 03 (run_chapter02_generation) is the chapters' own sequence:
// it reproduces, byte for byte, the memory columns that chapter 03 measured on a GPU for all
// six configurations of the expandable allocator, and chapter 02's caching allocator's
// within one 2 MiB small segment.
TEMPLATE_TEST_CASE("chapters 02 and 03's allocations on the committed workload: the memory columns",
                   "[allocator]", CachingAllocator, ExpandableAllocator) {
  FakeDevice device;
  device.total_bytes = 140 * gibibytes;
  const auto allocator = make_fake_allocator<TestType>(device);
  {
    const DeviceBuffer workspace(*allocator, 32 * mebibytes, fake_stream(1));  // StepContext's
    for (const auto& [B, N] : chapter02_configurations) {
      // Five timed runs, as the chapters make; the table shows the last one's peaks.
      AllocatorStats stats;
      measure_chapter02_configuration(
          *allocator, B, N, 5, [] {}, [&stats, &allocator] { stats = allocator->stats(); });
      std::printf("%s B = %d, N = %d: peak allocated %zu, peak reserved %zu, fragmentation "
                  "%.4f\n",
                  allocator->name().c_str(), B, N, stats.peak_allocated_bytes,
                  stats.peak_reserved_bytes, stats.fragmentation());
      if (B == 32 && N == 400) {
        CAPTURE(stats.fragmentation());
        if (std::is_same_v<TestType, ExpandableAllocator>) {
          CHECK(stats.fragmentation() < 0.15);  // chapter 03's goal
          CHECK(stats.peak_reserved_bytes <= 2 * stats.peak_allocated_bytes);
        } else {
          CHECK(stats.fragmentation() > 0.5);  // what chapter 03 removes
        }
      }
    }
  }
  allocator->empty_cache();
  CHECK(device.held_bytes == 0);
}
