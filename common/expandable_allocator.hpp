// common/expandable_allocator.hpp - PyTorch's "expandable segments", on CUDA virtual memory.
//
// The caching allocator strands memory when tensors grow: each cudaMalloc'd
// segment has a fixed size, so a block that outgrew its segment leaves the old one
// behind. PyTorch's answer (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) is to
// give each stream and pool ONE segment that grows in place:
//   * reserve a huge virtual address range once (cuMemAddressReserve): no memory
//     behind it yet, only addresses;
//   * when no cached block fits, create physical pages (cuMemCreate), map them at
//     the end of what is mapped (cuMemMap) and let the device read and write them
//     (cuMemSetAccess); the last free block and the new pages join into one block;
//   * the split and merge policy of the caching allocator (common/block_pool.hpp) runs
//     on top, except that large blocks are split for any rest of 512 B or more (rests
//     are not stranded, they merge back) and a request takes the lowest-addressed free
//     block that fits (first fit) rather than the smallest (best fit);
//   * empty_cache() synchronizes (cuMemUnmap does not), then unmaps and releases
//     every whole page that holds no live block, in the middle of a segment too.
//
// Where a block goes. A block taken from a run that was just grown sits at the
// run's low end: it continues right behind the data below it, and the unused rest
// of the last page stays on top, next to the unmapped addresses, where the next
// growth absorbs it. A block taken from a cached free block comes from the
// lowest-addressed free block that holds it, and sits at that block's HIGH end
// (PyTorch takes the smallest block that fits, at its low end). Both are for the
// growing KV cache: every step each tensor is re-allocated one position longer and
// the old copy freed right after. The free space then travels through the segment as
// a wave: each new copy is packed against the copies moved before it, and the rest of
// the hole stays next to the old copies, which are freed next and merge with it, so
// the hole comes back big enough for the next copy. Carved from the low end instead,
// the wave leaves slivers just too small for the next, longer copy, and they pile up.
// Best fit sends each copy to whichever hole is tightest, so a step's copies scatter
// over several holes that are each a little too small for the next step; the lowest
// hole that fits keeps them in one wave. On a whole decode loop of that kind (batch 32,
// GPT-2 small, N = 400, every step's activations and logits and a cuBLASLt workspace in
// the same allocator; tests/cpu/test_allocator_policy.cpp replays one call for call, and
// the replay gave a measured H200 run's memory columns exactly): 15.9% fragmentation
// with best fit at the high end, 6.4% with first fit, 23.6% with best fit at the low
// end. On the KV cache's requests alone the three differ less (8.9%, 9.6%, 25%).
//
// Differences from PyTorch besides placement: pages are the device's minimum
// granularity (2 MiB on current GPUs) for both pools, where PyTorch maps 20 MiB at a
// time for the large pool, so at most one partly used page per segment is wasted;
// and a request that no segment can grow to hold reserves a new segment.
//
// Reserved bytes are mapped bytes (what cudaMemGetInfo sees), not reserved
// addresses. The policy is separate from the driver: pages come from a PageSource,
// which is CUDA's virtual memory management on the GPU and a fake in the CPU tests.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/block_pool.hpp"
#include "common/device_allocator.hpp"

namespace ladder {

/// Virtual address ranges and the physical pages mapped into them.
class PageSource {
 public:
  virtual ~PageSource() = default;
  PageSource() = default;
  PageSource(const PageSource&) = delete;
  PageSource& operator=(const PageSource&) = delete;

  /// Bytes in one physical page; every range and mapping is a whole number of pages.
  virtual std::size_t page_bytes() const = 0;
  /// Reserves `bytes` of address space, page aligned, with nothing behind it.
  virtual std::uintptr_t reserve_range(std::size_t bytes) = 0;
  /// Gives the address range back; nothing may be mapped in it any more.
  virtual void free_range(std::uintptr_t address, std::size_t bytes) = 0;
  /// Backs `page_count` pages from `address` on with new physical memory the device
  /// can read and write. All or nothing: false (and nothing mapped) when the device
  /// is out of memory; other failures throw.
  virtual bool map_pages(std::uintptr_t address, std::size_t page_count) = 0;
  /// Unmaps those pages and returns their memory to the driver.
  virtual void unmap_pages(std::uintptr_t address, std::size_t page_count) = 0;
  /// Waits until the device has finished all work; unmapping does not wait by itself.
  virtual void synchronize() = 0;
  /// Free and total device memory; the total also bounds what can ever be mapped.
  virtual DeviceMemoryInfo memory_info() = 0;
  /// Whether `stream` is capturing a CUDA graph: the allocator then refuses to
  /// allocate (see require_not_capturing).
  virtual bool is_capturing(cudaStream_t stream) = 0;
};

/// CUDA virtual memory management on the device current when this is called.
/// Throws CudaError when the device does not support it.
std::unique_ptr<PageSource> make_virtual_memory_page_source();

class ExpandableAllocator final : public DeviceAllocator {
 public:
  /// Pages from CUDA virtual memory management on the current device.
  ExpandableAllocator();
  /// Pages from `source` (the CPU tests pass a fake).
  explicit ExpandableAllocator(std::unique_ptr<PageSource> source);
  /// Synchronizes, unmaps and releases every page and frees every address range, live
  /// blocks included (a warning on stderr says if any). Never throws.
  ~ExpandableAllocator() override;

  void* allocate(std::size_t bytes, cudaStream_t stream) override;
  void deallocate(void* pointer) override;
  void empty_cache() override;
  AllocatorStats stats() const override { return stats_.stats(); }
  void reset_peak_stats() override { stats_.reset_peaks(); }
  std::string name() const override { return "expandable"; }

  /// Every segment and its blocks (unmapped stretches included).
  std::vector<SegmentSnapshot> memory_snapshot() const { return blocks_.snapshot(); }
  std::size_t page_bytes() const { return page_bytes_; }

  /// Address space reserved for a new segment: the device's total memory for the
  /// large pool, so one segment can grow as far as the device allows; an eighth of
  /// it for the small pool, whose blocks are at most 1 MiB and rarely add up to much.
  /// A request larger than that gets a segment of its own size.
  std::size_t segment_range_bytes(PoolKind pool, std::size_t rounded_bytes) const;

 private:
  // Best fit, else grow a segment; the allocated block, or nullptr when the device
  // has no memory for it.
  const Block* try_allocate(std::size_t rounded_bytes, PoolKind pool, cudaStream_t stream);
  // Maps the pages missing under [run_start, run_start + bytes); false when out of memory.
  bool map_run(std::uintptr_t run_start, std::size_t bytes);
  // Unmaps every whole free page and frees the ranges of segments left empty.
  void release_free_pages();

  std::unique_ptr<PageSource> source_;
  std::size_t page_bytes_ = 0;
  std::size_t device_total_bytes_ = 0;
  BlockPool blocks_{LargeBlockSplitting::any_remainder};
  StatsTracker stats_;
};

}  // namespace ladder
