// common/caching_allocator.hpp - PyTorch's default CUDA caching allocator, rebuilt small.
//
// cudaMalloc and cudaFree are slow (cudaFree also synchronizes the device), so
// PyTorch never gives memory back: freed blocks stay cached and the next request
// of a similar size reuses them. This class follows PyTorch's CUDACachingAllocator
// (names in brackets); the block policy itself lives in common/block_pool.hpp.
//   allocate:   round up to 512 B; best fit among cached free blocks of the same
//               pool and stream [get_free_block]; if none fits, cudaMalloc a new
//               segment [alloc_block]: 2 MiB for small requests (<= 1 MiB)
//               [kSmallBuffer], 20 MiB for requests up to 10 MiB [kLargeBuffer,
//               kMinLargeAlloc], else the request rounded up to 2 MiB [kRoundLarge];
//               split off the rest when at least 512 B (small pool) or more than
//               1 MiB (large pool) remains [should_split].
//   deallocate: the block goes back to the cache and merges with free neighbours.
//   out of memory: when cudaMalloc fails, segments that are entirely free are
//               released and cudaMalloc is tried once more [release_cached_blocks];
//               then DeviceOutOfMemory.
//   empty_cache: synchronizes, then cudaFrees every entirely free segment.
// Its weakness, which the expandable allocator exists to remove: a tensor that grows
// a little every step (a KV cache re-allocated one position longer) soon outgrows its
// cached block; the old block cannot be reused for the bigger request and cannot be
// given back while any other block of its segment is live, so reserved memory climbs
// far above allocated memory (83% fragmentation at N = 400 for the PyTorch dynamic-cache
// variant, results/latest/pytorch_dynamic_cache.fp32.json).
//
// The policy is separate from the driver: segments come from a SegmentSource, which
// is cudaMalloc on the GPU and a fake that hands out bare addresses in the CPU tests.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/block_pool.hpp"
#include "common/device_allocator.hpp"

namespace ladder {

/// Requests up to 10 MiB share 20 MiB segments; bigger ones get a segment of their own.
inline constexpr std::size_t small_segment_bytes = 2 * mebibytes;   // [kSmallBuffer]
inline constexpr std::size_t large_segment_bytes = 20 * mebibytes;  // [kLargeBuffer]
inline constexpr std::size_t shared_large_segment_limit_bytes = 10 * mebibytes;
inline constexpr std::size_t own_segment_rounding_bytes = 2 * mebibytes;  // [kRoundLarge]

/// The size of the segment cudaMalloc'd for a rounded request that no cached block fits.
std::size_t caching_segment_bytes(std::size_t rounded_bytes);

/// Where the caching allocator's segments come from.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  SegmentSource() = default;
  SegmentSource(const SegmentSource&) = delete;
  SegmentSource& operator=(const SegmentSource&) = delete;

  /// A new segment of `bytes`, or nullptr when the device is out of memory; other
  /// failures throw.
  virtual void* allocate_segment(std::size_t bytes) = 0;
  virtual void free_segment(void* address, std::size_t bytes) = 0;
  /// Waits until the device has finished all work, so no queued kernel can still
  /// touch a segment that is about to be freed.
  virtual void synchronize() = 0;
  /// For the out-of-memory message.
  virtual DeviceMemoryInfo memory_info() = 0;
  /// Whether `stream` is capturing a CUDA graph: the allocator then refuses to
  /// allocate (see require_not_capturing).
  virtual bool is_capturing(cudaStream_t stream) = 0;
};

/// cudaMalloc and cudaFree on the device that is current when this is called.
std::unique_ptr<SegmentSource> make_cuda_malloc_segment_source();

class CachingAllocator final : public DeviceAllocator {
 public:
  /// Segments from cudaMalloc on the current device (one allocator per device).
  CachingAllocator();
  /// Segments from `source` (the CPU tests pass a fake).
  explicit CachingAllocator(std::unique_ptr<SegmentSource> source);
  /// Frees every segment, even those with live blocks (their DeviceBuffers must be
  /// gone by now; a warning on stderr says if not). Never throws.
  ~CachingAllocator() override;

  void* allocate(std::size_t bytes, cudaStream_t stream) override;
  void deallocate(void* pointer) override;
  void empty_cache() override;
  AllocatorStats stats() const override { return stats_.stats(); }
  void reset_peak_stats() override { stats_.reset_peaks(); }
  std::string name() const override { return "caching"; }

  /// Every segment and its blocks, for tests and for drawing the memory layout.
  std::vector<SegmentSnapshot> memory_snapshot() const { return blocks_.snapshot(); }

 private:
  // cudaMallocs a segment for the request and returns its address; on failure
  // releases the entirely free segments and tries once more, then throws.
  std::uintptr_t add_segment(std::size_t asked_bytes, std::size_t rounded_bytes, PoolKind pool,
                             cudaStream_t stream);
  void release_free_segments();

  std::unique_ptr<SegmentSource> source_;
  BlockPool blocks_{LargeBlockSplitting::remainder_above_one_mebibyte};
  StatsTracker stats_;
};

}  // namespace ladder
