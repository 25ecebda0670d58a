// common/block_pool.cpp - best fit, split and merge over address-ordered blocks.
#include "common/block_pool.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "common/cuda_check.hpp"

namespace ladder {

namespace {

// Streams are compared by handle value: any fixed order groups each stream's blocks.
std::uintptr_t stream_key(cudaStream_t stream) { return reinterpret_cast<std::uintptr_t>(stream); }

std::string hex_address(std::uintptr_t address) {
  std::ostringstream text;
  text << "0x" << std::hex << address;
  return text.str();
}

}  // namespace

// ---------------------------------------------------------------- sizes

std::size_t round_up(std::size_t bytes, std::size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

std::size_t round_request(std::size_t bytes) {
  // Beyond this no GPU exists, and the roundings (up to 2 MiB pages) must not wrap.
  constexpr std::size_t largest_request = std::numeric_limits<std::size_t>::max() / 2;
  if (bytes > largest_request) {
    throw DeviceOutOfMemory("out of device memory: asked for " +
                            format_bytes(static_cast<double>(bytes)) +
                            ", more than any GPU holds; check the size computation");
  }
  return bytes <= minimum_block_bytes ? minimum_block_bytes : round_up(bytes, minimum_block_bytes);
}

PoolKind pool_for(std::size_t rounded_bytes) {
  return rounded_bytes <= small_request_limit_bytes ? PoolKind::small : PoolKind::large;
}

// ---------------------------------------------------------------- block pool

bool BlockPool::ByStreamSizeAddress::operator()(const Block* left, const Block* right) const {
  return std::make_tuple(stream_key(left->stream), left->size, left->address) <
         std::make_tuple(stream_key(right->stream), right->size, right->address);
}

bool BlockPool::ByStreamAddress::operator()(const Block* left, const Block* right) const {
  return std::make_tuple(stream_key(left->stream), left->address) <
         std::make_tuple(stream_key(right->stream), right->address);
}

BlockPool::BlockPool(LargeBlockSplitting large_block_splitting)
    : large_block_splitting_(large_block_splitting) {}

void BlockPool::add_segment(std::uintptr_t address, std::size_t bytes, cudaStream_t stream,
                            PoolKind pool, BlockState initial_state) {
  if (initial_state == BlockState::allocated)
    throw std::logic_error("BlockPool::add_segment: a new segment starts free or unmapped");
  if (segments_.count(address) != 0)
    throw std::logic_error("BlockPool::add_segment: segment " + hex_address(address) +
                           " is already registered");
  segments_.emplace(address, Segment{address, bytes, stream, pool});
  Block block;
  block.address = address;
  block.size = bytes;
  block.state = initial_state;
  block.segment_address = address;
  block.stream = stream;
  block.pool = pool;
  index(blocks_.emplace(address, block).first->second);
}

void BlockPool::remove_segment(std::uintptr_t segment_address) {
  const auto segment = segments_.find(segment_address);
  const auto block = blocks_.find(segment_address);
  if (segment == segments_.end() || block == blocks_.end() ||
      block->second.size != segment->second.size || block->second.state == BlockState::allocated) {
    throw std::logic_error("BlockPool::remove_segment: segment " + hex_address(segment_address) +
                           " is not one free or unmapped block");
  }
  unindex(block->second);
  blocks_.erase(block);
  segments_.erase(segment);
}

const Block* BlockPool::best_fit(PoolKind pool, cudaStream_t stream, std::size_t bytes) const {
  Block key;
  key.stream = stream;
  key.size = bytes;
  const auto& free_blocks = free_by_pool_[pool_index(pool)];
  const auto found = free_blocks.lower_bound(&key);
  // The index is ordered by stream first: the first block at or after the key is the
  // best fit of this stream, unless it already belongs to the next stream.
  if (found == free_blocks.end() || (*found)->stream != stream) return nullptr;
  return *found;
}

const Block* BlockPool::first_fit(PoolKind pool, cudaStream_t stream, std::size_t bytes) const {
  Block key;
  key.stream = stream;
  key.size = bytes;
  const auto& free_blocks = free_by_pool_[pool_index(pool)];
  // The index is ordered by stream, then size: from the key on, up to the next stream's
  // blocks, come exactly this stream's free blocks that are large enough.
  const Block* lowest = nullptr;
  for (auto found = free_blocks.lower_bound(&key);
       found != free_blocks.end() && (*found)->stream == stream; ++found) {
    if (lowest == nullptr || (*found)->address < lowest->address) lowest = *found;
  }
  return lowest;
}

const Block& BlockPool::allocate(std::uintptr_t block_address, std::size_t bytes,
                                 BlockPlacement placement) {
  auto block = find_block(block_address, "allocate");
  if (block->second.state != BlockState::free || block->second.size < bytes)
    throw std::logic_error("BlockPool::allocate: block " + hex_address(block_address) +
                           " is not free or too small");
  if (should_split(block->second, bytes)) {
    block = placement == BlockPlacement::low_end
                ? split(block, bytes)
                : std::next(split(block, block->second.size - bytes));
  }
  unindex(block->second);
  block->second.state = BlockState::allocated;
  return block->second;
}

std::size_t BlockPool::deallocate(std::uintptr_t address) {
  const auto block = blocks_.find(address);
  if (block == blocks_.end() || block->second.state != BlockState::allocated) {
    throw std::invalid_argument("deallocate: " + hex_address(address) +
                                " is not a live block of this allocator (freed twice, or "
                                "allocated elsewhere)");
  }
  const std::size_t freed_bytes = block->second.size;
  block->second.state = BlockState::free;
  index(block->second);
  merge_with_neighbours(block);
  return freed_bytes;
}

void BlockPool::change_state(std::uintptr_t address, std::size_t bytes, BlockState new_state) {
  auto block = find_block(address, "change_state");
  if (block->second.state == BlockState::allocated || block->second.end() < address + bytes)
    throw std::logic_error("BlockPool::change_state: [" + hex_address(address) + ", +" +
                           std::to_string(bytes) + ") is not inside one free or unmapped block");
  if (block->second.address < address)
    block = std::next(split(block, address - block->second.address));
  if (block->second.size > bytes) block = split(block, bytes);
  unindex(block->second);
  block->second.state = new_state;
  index(block->second);
  merge_with_neighbours(block);
}

std::optional<std::uintptr_t> BlockPool::find_growable_run(PoolKind pool, cudaStream_t stream,
                                                           std::size_t bytes) const {
  Block key;
  key.stream = stream;
  const auto& unmapped_blocks = unmapped_by_pool_[pool_index(pool)];
  for (auto unmapped = unmapped_blocks.lower_bound(&key);
       unmapped != unmapped_blocks.end() && (*unmapped)->stream == stream; ++unmapped) {
    auto run_start = blocks_.find((*unmapped)->address);
    if (run_start != blocks_.begin()) {
      const auto before = std::prev(run_start);
      if (before->second.state == BlockState::free &&
          before->second.segment_address == run_start->second.segment_address)
        run_start = before;
    }
    std::size_t run_bytes = 0;
    for (auto walk = run_start; walk != blocks_.end() && run_bytes < bytes &&
                                walk->second.segment_address == run_start->second.segment_address &&
                                walk->second.state != BlockState::allocated;
         ++walk) {
      run_bytes += walk->second.size;
    }
    if (run_bytes >= bytes) return run_start->second.address;
  }
  return std::nullopt;
}

std::vector<Block> BlockPool::blocks_between(std::uintptr_t begin, std::uintptr_t end) const {
  std::vector<Block> overlapping;
  auto block = blocks_.upper_bound(begin);
  if (block != blocks_.begin()) --block;
  for (; block != blocks_.end() && block->second.address < end; ++block) {
    if (block->second.end() > begin) overlapping.push_back(block->second);
  }
  return overlapping;
}

std::vector<Block> BlockPool::free_blocks() const {
  std::vector<Block> free;
  for (const auto& [address, block] : blocks_) {
    if (block.state == BlockState::free) free.push_back(block);
  }
  return free;
}

std::vector<Block> BlockPool::all_blocks() const {
  std::vector<Block> blocks;
  blocks.reserve(blocks_.size());
  for (const auto& [address, block] : blocks_) blocks.push_back(block);
  return blocks;
}

std::vector<SegmentSnapshot> BlockPool::snapshot() const {
  std::vector<SegmentSnapshot> segments;
  for (const auto& [address, segment] : segments_) {
    segments.push_back({segment, blocks_between(segment.address, segment.address + segment.size)});
  }
  return segments;
}

bool BlockPool::should_split(const Block& block, std::size_t bytes) const {
  const std::size_t remainder = block.size - bytes;
  if (block.pool == PoolKind::small || large_block_splitting_ == LargeBlockSplitting::any_remainder)
    return remainder >= minimum_block_bytes;
  return remainder > small_request_limit_bytes;
}

bool BlockPool::same_segment_and_state(const Block& left, const Block& right) const {
  return left.segment_address == right.segment_address && left.state == right.state;
}

BlockPool::BlockMap::iterator BlockPool::find_block(std::uintptr_t address, const char* operation) {
  auto block = blocks_.upper_bound(address);
  if (block == blocks_.begin())
    throw std::logic_error(std::string("BlockPool::") + operation + ": no block holds " +
                           hex_address(address));
  --block;
  if (block->second.end() <= address)
    throw std::logic_error(std::string("BlockPool::") + operation + ": no block holds " +
                           hex_address(address));
  return block;
}

void BlockPool::index(const Block& block) {
  if (block.state == BlockState::free) free_by_pool_[pool_index(block.pool)].insert(&block);
  if (block.state == BlockState::unmapped) unmapped_by_pool_[pool_index(block.pool)].insert(&block);
}

void BlockPool::unindex(const Block& block) {
  if (block.state == BlockState::free) free_by_pool_[pool_index(block.pool)].erase(&block);
  if (block.state == BlockState::unmapped) unmapped_by_pool_[pool_index(block.pool)].erase(&block);
}

BlockPool::BlockMap::iterator BlockPool::split(BlockMap::iterator block, std::size_t first_bytes) {
  unindex(block->second);
  Block rest = block->second;
  rest.address = block->second.address + first_bytes;
  rest.size = block->second.size - first_bytes;
  block->second.size = first_bytes;
  index(block->second);
  index(blocks_.emplace_hint(std::next(block), rest.address, rest)->second);
  return block;
}

BlockPool::BlockMap::iterator BlockPool::absorb_next(BlockMap::iterator block) {
  const auto next = std::next(block);
  unindex(block->second);
  unindex(next->second);
  block->second.size += next->second.size;
  blocks_.erase(next);
  index(block->second);
  return block;
}

BlockPool::BlockMap::iterator BlockPool::merge_with_neighbours(BlockMap::iterator block) {
  if (block->second.state == BlockState::allocated) return block;
  const auto next = std::next(block);
  if (next != blocks_.end() && same_segment_and_state(block->second, next->second))
    block = absorb_next(block);
  if (block != blocks_.begin()) {
    const auto before = std::prev(block);
    if (same_segment_and_state(before->second, block->second)) block = absorb_next(before);
  }
  return block;
}

// ---------------------------------------------------------------- statistics

void StatsTracker::record_allocation(std::size_t block_bytes) {
  stats_.allocated_bytes += block_bytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.allocations;
}

void StatsTracker::record_deallocation(std::size_t block_bytes) {
  stats_.allocated_bytes -= block_bytes;
}

void StatsTracker::record_reservation(std::size_t bytes, std::uint64_t driver_calls) {
  stats_.reserved_bytes += bytes;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  stats_.driver_allocations += driver_calls;
}

void StatsTracker::record_release(std::size_t bytes, std::uint64_t driver_calls) {
  stats_.reserved_bytes -= bytes;
  stats_.driver_frees += driver_calls;
}

void StatsTracker::reset_peaks() {
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
  stats_.allocations = 0;
  stats_.driver_allocations = 0;
  stats_.driver_frees = 0;
}

// ---------------------------------------------------------------- out of memory

void require_not_capturing(bool stream_capturing, const char* allocator, std::size_t asked_bytes) {
  if (!stream_capturing) return;
  throw std::logic_error(std::string(allocator) + ": asked for " +
                         format_bytes(static_cast<double>(asked_bytes)) +
                         " on a stream that is capturing a CUDA graph; the graph would replay "
                         "this address forever, so allocate every buffer before the capture");
}

std::string out_of_memory_message(std::size_t asked_bytes, std::size_t rounded_bytes,
                                  const AllocatorStats& stats, const DeviceMemoryInfo& memory) {
  const auto bytes = [](std::size_t count) { return format_bytes(static_cast<double>(count)); };
  return "out of device memory: asked for " + bytes(asked_bytes) + " (rounded to " +
         bytes(rounded_bytes) + "); allocator holds " + bytes(stats.reserved_bytes) +
         " reserved, " + bytes(stats.allocated_bytes) + " allocated; GPU has " +
         bytes(memory.free_bytes) + " free of " + bytes(memory.total_bytes) +
         "; use a smaller batch or fewer tokens, or free the GPU of other work";
}

}  // namespace ladder
