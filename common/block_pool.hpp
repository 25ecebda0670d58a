// common/block_pool.hpp - the block policy both device allocators share.
//
// PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) carves the
// memory it gets from the driver ("segments") into blocks. This module is that
// bookkeeping, written anew; PyTorch's names are in brackets:
//   * a request is rounded up to a multiple of 512 bytes [round_size, kMinBlockSize];
//   * requests up to 1 MiB use the small pool, larger ones the large pool [kSmallSize],
//     so small tensors never break up the big blocks;
//   * a request takes the smallest free block of its pool and stream that fits, the
//     lowest address among equals [get_free_block, BlockComparatorSize] - best fit;
//   * a block bigger than the request is split and the rest stays free [should_split];
//   * a freed block merges with the free blocks beside it in its segment
//     [free_block, try_merge_blocks];
//   * blocks are cached per stream: a block freed on stream A is handed out again
//     only on stream A, whose own ordering makes the kernels queued before the free
//     finish before any kernel queued after the reuse starts - no synchronization.
// The caching allocator gets whole segments from cudaMalloc; the expandable
// allocator reserves a virtual address range per stream and pool and maps physical
// pages into it, so its blocks can also be "unmapped" address space
// [Block::mapped, BlockPool::unmapped].
//
// Nothing here touches the device: addresses are plain integers, so the whole
// policy runs in CPU tests against fake segment and page sources.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/device_allocator.hpp"

namespace ladder {

inline constexpr std::size_t kibibytes = 1024;
inline constexpr std::size_t mebibytes = 1024 * kibibytes;

/// Every block size is a multiple of this [kMinBlockSize].
inline constexpr std::size_t minimum_block_bytes = 512;
/// Rounded requests up to this size go to the small pool [kSmallSize].
inline constexpr std::size_t small_request_limit_bytes = 1 * mebibytes;

/// `bytes` rounded up to a multiple of 512 (0 and 1 byte become 512).
/// Throws DeviceOutOfMemory for sizes no device could ever hold (near SIZE_MAX).
std::size_t round_request(std::size_t bytes);

/// `bytes` rounded up to a multiple of `alignment` (any positive alignment).
std::size_t round_up(std::size_t bytes, std::size_t alignment);

/// A device address of the policy as the pointer callers get. The policy keeps
/// addresses as integers because it computes with them and never dereferences them.
inline void* as_pointer(std::uintptr_t address) {
  return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
}

enum class PoolKind { small, large };

/// The pool a rounded request belongs to.
PoolKind pool_for(std::size_t rounded_bytes);

enum class BlockState {
  free,       ///< cached: backed by memory, owned by nobody
  allocated,  ///< handed out by allocate()
  unmapped,   ///< address space without memory behind it (expandable segments only)
};

/// When a large-pool block bigger than the request is split.
enum class LargeBlockSplitting {
  /// Only when more than 1 MiB would remain (PyTorch's default): a smaller rest
  /// stays with the block, so large segments are not cut into slivers.
  remainder_above_one_mebibyte,
  /// Whenever 512 bytes or more would remain (PyTorch with expandable segments):
  /// the segment grows at its end, so slivers merge back instead of piling up.
  any_remainder,
};

/// Which end of a larger free block a request is carved from; the rest stays at the other.
enum class BlockPlacement {
  low_end,   ///< PyTorch's only choice, and the caching allocator's
  high_end,  ///< the expandable allocator's choice for cached blocks (see there)
};

/// A contiguous piece of a segment. Blocks of one segment tile it without gaps.
struct Block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  BlockState state = BlockState::free;
  std::uintptr_t segment_address = 0;  ///< the segment it was carved from; merges stay inside
  cudaStream_t stream = nullptr;       ///< the segment's stream
  PoolKind pool = PoolKind::small;     ///< the segment's pool

  std::uintptr_t end() const { return address + size; }
};

/// Memory obtained from the driver: a cudaMalloc'd range or a reserved virtual range.
struct Segment {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  cudaStream_t stream = nullptr;
  PoolKind pool = PoolKind::small;
};

/// A segment and its blocks in address order, as PyTorch's memory_snapshot() lists them.
struct SegmentSnapshot {
  Segment segment;
  std::vector<Block> blocks;
};

/// All segments and blocks of one allocator, and the free (and unmapped) blocks of
/// each pool indexed for best fit. Addresses name blocks: a Block reference is only
/// valid until the next call that changes the pool.
class BlockPool {
 public:
  explicit BlockPool(LargeBlockSplitting large_block_splitting);

  /// Registers [address, address + bytes) as a segment of `stream` and `pool` holding
  /// one block in `initial_state` (free or unmapped).
  void add_segment(std::uintptr_t address, std::size_t bytes, cudaStream_t stream, PoolKind pool,
                   BlockState initial_state);
  /// Forgets a segment that is a single block, free or unmapped.
  void remove_segment(std::uintptr_t segment_address);

  /// Best fit: the smallest free block of `pool` and `stream` with at least `bytes`,
  /// lowest address among equals; nullptr if none.
  const Block* best_fit(PoolKind pool, cudaStream_t stream, std::size_t bytes) const;
  /// First fit by address: the lowest-addressed free block of `pool` and `stream` with at
  /// least `bytes`; nullptr if none. (The expandable allocator's choice: see there.)
  const Block* first_fit(PoolKind pool, cudaStream_t stream, std::size_t bytes) const;

  /// Hands out `bytes` at one end of the free block at `block_address`, splitting off
  /// the rest when the split rule allows. The returned block may be larger than `bytes`.
  const Block& allocate(std::uintptr_t block_address, std::size_t bytes, BlockPlacement placement);

  /// Frees the allocated block at `address` and merges it with free neighbours.
  /// Returns the freed block's size (before merging). Throws std::invalid_argument
  /// when `address` is not an allocated block (a double free, or a foreign pointer).
  std::size_t deallocate(std::uintptr_t address);

  /// Gives [address, address + bytes) the state `new_state`; the range must lie in one
  /// block that is free or unmapped. Splits that block as needed and merges the range
  /// with neighbours in the same state. (Mapping and unmapping pages of expandable segments.)
  void change_state(std::uintptr_t address, std::size_t bytes, BlockState new_state);

  /// Where an expandable segment of `pool` and `stream` can grow to hold `bytes`: the
  /// start of the first run (by address) of adjacent free and unmapped blocks that
  /// contains an unmapped block and spans at least `bytes`. PyTorch starts at a free
  /// block just before the unmapped one so that it maps only what is missing
  /// [find_expandable_block]. Empty when no segment has room.
  std::optional<std::uintptr_t> find_growable_run(PoolKind pool, cudaStream_t stream,
                                                  std::size_t bytes) const;

  /// Copies of the blocks that overlap [begin, end), in address order.
  std::vector<Block> blocks_between(std::uintptr_t begin, std::uintptr_t end) const;
  /// Copies of all free blocks, in address order.
  std::vector<Block> free_blocks() const;
  /// Copies of all blocks, in address order.
  std::vector<Block> all_blocks() const;
  const std::map<std::uintptr_t, Segment>& segments() const { return segments_; }
  std::vector<SegmentSnapshot> snapshot() const;

 private:
  using BlockMap = std::map<std::uintptr_t, Block>;

  struct ByStreamSizeAddress {
    bool operator()(const Block* left, const Block* right) const;
  };
  struct ByStreamAddress {
    bool operator()(const Block* left, const Block* right) const;
  };

  static std::size_t pool_index(PoolKind pool) { return pool == PoolKind::small ? 0 : 1; }
  bool should_split(const Block& block, std::size_t bytes) const;
  bool same_segment_and_state(const Block& left, const Block& right) const;
  BlockMap::iterator find_block(std::uintptr_t address, const char* operation);
  // Keeps the free and unmapped indexes in step with a block's state; a block must be
  // taken out before its size or state changes and put back afterwards.
  void index(const Block& block);
  void unindex(const Block& block);
  // Cuts `block` into its first `first_bytes` and the rest (same state); returns the first.
  BlockMap::iterator split(BlockMap::iterator block, std::size_t first_bytes);
  // Joins `block` with the next block; returns the joined block.
  BlockMap::iterator absorb_next(BlockMap::iterator block);
  BlockMap::iterator merge_with_neighbours(BlockMap::iterator block);

  LargeBlockSplitting large_block_splitting_;
  BlockMap blocks_;                             // every block of every segment, by address
  std::map<std::uintptr_t, Segment> segments_;  // by address
  std::array<std::set<const Block*, ByStreamSizeAddress>, 2> free_by_pool_;
  std::array<std::set<const Block*, ByStreamAddress>, 2> unmapped_by_pool_;
};

/// Keeps AllocatorStats: current values, peaks since the last reset, and counters.
class StatsTracker {
 public:
  void record_allocation(std::size_t block_bytes);
  void record_deallocation(std::size_t block_bytes);
  void record_reservation(std::size_t bytes, std::uint64_t driver_calls);
  void record_release(std::size_t bytes, std::uint64_t driver_calls);
  void reset_peaks();
  const AllocatorStats& stats() const { return stats_; }

 private:
  AllocatorStats stats_;
};

/// Free and total memory of the device, as cudaMemGetInfo reports them.
struct DeviceMemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// cudaMemGetInfo on the current device: what the real segment and page sources
/// report (the CPU tests' fake devices report their own numbers).
DeviceMemoryInfo query_device_memory();

/// "out of device memory: asked for X (rounded to Y); allocator holds Z reserved,
/// W allocated; GPU has F free of T" and what to do about it.
std::string out_of_memory_message(std::size_t asked_bytes, std::size_t rounded_bytes,
                                  const AllocatorStats& stats, const DeviceMemoryInfo& memory);

/// Throws std::logic_error, naming `allocator` and the request, when `stream_capturing`:
/// the stream asked for is capturing a CUDA graph. A graph replays the addresses it was
/// captured with, so a block handed out now would be written by every replay, long after
/// its owner freed it and someone else got it back; and cudaMalloc is not allowed inside
/// a capture at all. Every buffer a graph uses is allocated before its capture begins.
void require_not_capturing(bool stream_capturing, const char* allocator, std::size_t asked_bytes);

}  // namespace ladder
