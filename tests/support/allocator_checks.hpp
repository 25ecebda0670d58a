// tests/support/allocator_checks.hpp - the checks both allocator test suites use.
//
// The CPU tests (fake sources) and the GPU tests (the real driver) keep a map of the
// blocks they believe are live, address -> bytes asked for, and hold the allocator to it:
//   std::map<std::uintptr_t, std::size_t> live;
//   testing::add_live_block(live, allocator.allocate(bytes, stream), bytes);
//   testing::check_bookkeeping(allocator, live);
// and both check what a failed request says:
//   const std::string message = testing::check_out_of_memory(allocator, bytes, stream);
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>

#include "common/block_pool.hpp"
#include "common/cuda_check.hpp"

namespace ladder::testing {

/// Records a new live block after checking that it is 256-byte aligned and overlaps
/// no other live block.
inline void add_live_block(std::map<std::uintptr_t, std::size_t>& live, void* pointer,
                           std::size_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  REQUIRE(address % 256 == 0);
  const auto next = live.lower_bound(address);
  if (next != live.end()) REQUIRE(address + bytes <= next->first);
  if (next != live.begin()) REQUIRE(std::prev(next)->first + std::prev(next)->second <= address);
  live.emplace(address, bytes);
}

/// Checks an allocator's memory_snapshot() against the live blocks: blocks tile
/// their segments, neighbours in the same state have merged, every live pointer is
/// an allocated block at least as big as asked, and the statistics add up (allocated
/// = allocated blocks, reserved = blocks with memory behind them). Returns the
/// reserved bytes.
template <typename Allocator>
std::size_t check_bookkeeping(const Allocator& allocator,
                              const std::map<std::uintptr_t, std::size_t>& live) {
  std::size_t allocated_bytes = 0;
  std::size_t backed_bytes = 0;
  std::size_t allocated_blocks = 0;
  std::string problem;
  for (const SegmentSnapshot& snapshot : allocator.memory_snapshot()) {
    std::uintptr_t expected_address = snapshot.segment.address;
    const Block* previous = nullptr;
    for (const Block& block : snapshot.blocks) {
      if (block.address != expected_address) problem = "blocks do not tile their segment";
      if (block.address % minimum_block_bytes != 0 || block.size % minimum_block_bytes != 0)
        problem = "a block is not 512-byte aligned";
      if (previous != nullptr && previous->state != BlockState::allocated &&
          previous->state == block.state)
        problem = "two neighbouring blocks in the same state did not merge";
      if (block.state == BlockState::allocated) {
        allocated_bytes += block.size;
        ++allocated_blocks;
        const auto asked = live.find(block.address);
        if (asked == live.end() || block.size < asked->second)
          problem = "an allocated block the test does not know, or smaller than asked";
      }
      if (block.state != BlockState::unmapped) backed_bytes += block.size;
      expected_address = block.end();
      previous = &block;
    }
    if (expected_address != snapshot.segment.address + snapshot.segment.size)
      problem = "blocks do not cover their segment";
  }
  INFO(problem);
  REQUIRE(problem.empty());
  REQUIRE(allocated_blocks == live.size());
  const AllocatorStats stats = allocator.stats();
  REQUIRE(stats.allocated_bytes == allocated_bytes);
  REQUIRE(stats.reserved_bytes == backed_bytes);
  REQUIRE(stats.peak_allocated_bytes >= allocated_bytes);
  REQUIRE(stats.peak_reserved_bytes >= backed_bytes);
  return backed_bytes;
}

/// Checks that allocator.allocate(bytes, stream) throws DeviceOutOfMemory whose message
/// says "out of device memory: asked for <bytes>". Returns the message for further checks.
template <typename Allocator>
std::string check_out_of_memory(Allocator& allocator, std::size_t bytes, cudaStream_t stream) {
  try {
    allocator.allocate(bytes, stream);
  } catch (const DeviceOutOfMemory& error) {
    const std::string message = error.what();
    CHECK_THAT(message, Catch::Matchers::Contains("out of device memory: asked for " +
                                                  format_bytes(static_cast<double>(bytes))));
    return message;
  }
  FAIL("allocate() should have thrown DeviceOutOfMemory");
  return {};
}

}  // namespace ladder::testing
