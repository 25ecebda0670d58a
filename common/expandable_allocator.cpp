// common/expandable_allocator.cpp - segments that grow in place, page by page.
#include "common/expandable_allocator.hpp"

#include <cuda.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/driver_api.hpp"

namespace ladder {

namespace {

// ---------------------------------------------------------------- the GPU's pages

class VirtualMemoryPageSource final : public PageSource {
 public:
  VirtualMemoryPageSource() : driver_(driver_api()) {
    CUDA_CHECK(cudaGetDevice(&device_));
    // Since CUDA 12 this also creates the device's primary context and makes it
    // current, which the driver calls below work in.
    CUDA_CHECK(cudaSetDevice(device_));
    CUdevice driver_device = 0;
    CU_CHECK(driver_.cuDeviceGet(&driver_device, device_));
    int supported = 0;
    CU_CHECK(driver_.cuDeviceGetAttribute(
        &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, driver_device));
    if (supported == 0) {
      throw CudaError("device " + std::to_string(device_) +
                      " does not support CUDA virtual memory management, which the expandable "
                      "allocator needs; use the caching allocator");
    }
    page_properties_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    page_properties_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    page_properties_.location.id = device_;
    // MINIMUM, not RECOMMENDED: the page is the unit in which a segment grows and
    // shrinks, so the smallest page strands the least memory at a segment's end and
    // lets empty_cache() give back the most. A larger recommended granularity only
    // saves mapping calls, and growth is rare once the cache is warm.
    CU_CHECK(driver_.cuMemGetAllocationGranularity(&page_bytes_, &page_properties_,
                                                   CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    device_access_.location = page_properties_.location;
    device_access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }

  std::size_t page_bytes() const override { return page_bytes_; }

  std::uintptr_t reserve_range(std::size_t bytes) override {
    CUdeviceptr address = 0;
    CU_CHECK(driver_.cuMemAddressReserve(&address, bytes, page_bytes_, 0, 0));
    return address;
  }

  void free_range(std::uintptr_t address, std::size_t bytes) override {
    CU_CHECK(driver_.cuMemAddressFree(address, bytes));
  }

  bool map_pages(std::uintptr_t address, std::size_t page_count) override {
    std::size_t mapped = 0;
    try {
      while (mapped < page_count && map_one_page(address + mapped * page_bytes_)) ++mapped;
      if (mapped == page_count) {
        // One call for the whole stretch: access rights may span several mappings.
        CU_CHECK(driver_.cuMemSetAccess(address, page_count * page_bytes_, &device_access_, 1));
        return true;
      }
    } catch (...) {
      unmap_pages(address, mapped);
      throw;
    }
    unmap_pages(address, mapped);
    return false;
  }

  void unmap_pages(std::uintptr_t address, std::size_t page_count) override {
    for (std::size_t page = 0; page < page_count; ++page) {
      const std::uintptr_t page_address = address + page * page_bytes_;
      const auto handle = page_handles_.find(page_address);
      if (handle == page_handles_.end())
        throw std::logic_error("unmap_pages: no page is mapped at " + std::to_string(page_address));
      // Unmapped page by page: cuMemUnmap must cover exactly what one cuMemMap mapped.
      CU_CHECK(driver_.cuMemUnmap(page_address, page_bytes_));
      CU_CHECK(driver_.cuMemRelease(handle->second));
      page_handles_.erase(handle);
    }
  }

  void synchronize() override { CUDA_CHECK(cudaDeviceSynchronize()); }

  DeviceMemoryInfo memory_info() override { return query_device_memory(); }

  bool is_capturing(cudaStream_t stream) override { return ::ladder::stream_is_capturing(stream); }

 private:
  // One handle per page, so any page can later be unmapped and released on its own.
  bool map_one_page(std::uintptr_t page_address) {
    CUmemGenericAllocationHandle handle = 0;
    const CUresult created = driver_.cuMemCreate(&handle, page_bytes_, &page_properties_, 0);
    if (created == CUDA_ERROR_OUT_OF_MEMORY) return false;
    CU_CHECK(created);
    const CUresult mapped = driver_.cuMemMap(page_address, page_bytes_, 0, handle, 0);
    if (mapped != CUDA_SUCCESS) {
      CU_CHECK(driver_.cuMemRelease(handle));
      CU_CHECK(mapped);
    }
    page_handles_.emplace(page_address, handle);
    return true;
  }

  const DriverApi& driver_;
  int device_ = 0;
  std::size_t page_bytes_ = 0;
  CUmemAllocationProp page_properties_{};
  CUmemAccessDesc device_access_{};
  std::map<std::uintptr_t, CUmemGenericAllocationHandle> page_handles_;  // by page address
};

// Stretches of a segment with memory behind them (every block not unmapped), as
// (address, bytes). They start and end on page boundaries, because unmapped
// blocks and segments do.
std::vector<std::pair<std::uintptr_t, std::size_t>> mapped_stretches(
    const SegmentSnapshot& segment) {
  std::vector<std::pair<std::uintptr_t, std::size_t>> stretches;
  for (const Block& block : segment.blocks) {
    if (block.state == BlockState::unmapped) continue;
    if (!stretches.empty() && stretches.back().first + stretches.back().second == block.address)
      stretches.back().second += block.size;
    else
      stretches.emplace_back(block.address, block.size);
  }
  return stretches;
}

}  // namespace

std::unique_ptr<PageSource> make_virtual_memory_page_source() {
  return std::make_unique<VirtualMemoryPageSource>();
}

// ---------------------------------------------------------------- the allocator

ExpandableAllocator::ExpandableAllocator()
    : ExpandableAllocator(make_virtual_memory_page_source()) {}

ExpandableAllocator::ExpandableAllocator(std::unique_ptr<PageSource> source)
    : source_(std::move(source)),
      page_bytes_(source_->page_bytes()),
      device_total_bytes_(source_->memory_info().total_bytes) {}

ExpandableAllocator::~ExpandableAllocator() {
  const AllocatorTeardown teardown("expandable allocator");
  teardown.warn_if_allocated(stats_.stats(), "unmapped memory");
  teardown.attempt([&] { source_->synchronize(); });
  for (const SegmentSnapshot& segment : blocks_.snapshot()) {
    for (const auto& [address, bytes] : mapped_stretches(segment))
      teardown.attempt([&] { source_->unmap_pages(address, bytes / page_bytes_); });
    teardown.attempt([&] { source_->free_range(segment.segment.address, segment.segment.size); });
  }
}

std::size_t ExpandableAllocator::segment_range_bytes(PoolKind pool,
                                                     std::size_t rounded_bytes) const {
  const std::size_t usual_bytes =
      pool == PoolKind::large ? device_total_bytes_ : device_total_bytes_ / 8;
  return round_up(std::max({usual_bytes, rounded_bytes, page_bytes_}), page_bytes_);
}

void* ExpandableAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  require_not_capturing(source_->is_capturing(stream), "expandable allocator", bytes);
  const std::size_t rounded_bytes = round_request(bytes);
  const PoolKind pool = pool_for(rounded_bytes);
  const Block* block = try_allocate(rounded_bytes, pool, stream);
  if (block == nullptr) {
    // As PyTorch does: give back what is cached, then try once more.
    release_free_pages();
    block = try_allocate(rounded_bytes, pool, stream);
  }
  if (block == nullptr) {
    throw DeviceOutOfMemory(
        out_of_memory_message(bytes, rounded_bytes, stats_.stats(), source_->memory_info()));
  }
  stats_.record_allocation(block->size);
  return as_pointer(block->address);
}

void ExpandableAllocator::deallocate(void* pointer) {
  if (pointer == nullptr) return;
  stats_.record_deallocation(blocks_.deallocate(reinterpret_cast<std::uintptr_t>(pointer)));
}

void ExpandableAllocator::empty_cache() { release_free_pages(); }

const Block* ExpandableAllocator::try_allocate(std::size_t rounded_bytes, PoolKind pool,
                                               cudaStream_t stream) {
  // The lowest-addressed cached block that fits, carved from its high end; a grown run
  // from its low end: see "Where a block goes" in the header.
  if (const Block* cached = blocks_.first_fit(pool, stream, rounded_bytes))
    return &blocks_.allocate(cached->address, rounded_bytes, BlockPlacement::high_end);
  std::optional<std::uintptr_t> run = blocks_.find_growable_run(pool, stream, rounded_bytes);
  if (!run) {
    // A new segment must map all of the request: reserve no addresses for pages the
    // device does not have.
    if (round_up(rounded_bytes, page_bytes_) > source_->memory_info().free_bytes) return nullptr;
    const std::size_t range_bytes = segment_range_bytes(pool, rounded_bytes);
    run = source_->reserve_range(range_bytes);
    blocks_.add_segment(*run, range_bytes, stream, pool, BlockState::unmapped);
  }
  if (!map_run(*run, rounded_bytes)) return nullptr;
  return &blocks_.allocate(*run, rounded_bytes, BlockPlacement::low_end);
}

bool ExpandableAllocator::map_run(std::uintptr_t run_start, std::size_t bytes) {
  // Unmapped blocks start and end on page boundaries, so mapping whole pages from
  // the start of each covers the run and never reaches past its block.
  std::vector<std::pair<std::uintptr_t, std::size_t>> missing;
  std::size_t missing_bytes = 0;
  for (const Block& block : blocks_.blocks_between(run_start, run_start + bytes)) {
    if (block.state != BlockState::unmapped) continue;
    const std::size_t needed =
        round_up(std::min(block.end(), run_start + bytes) - block.address, page_bytes_);
    missing.emplace_back(block.address, needed);
    missing_bytes += needed;
  }
  // Fail at once when the device lacks the memory, rather than after creating (and
  // then releasing) tens of thousands of pages; a failing cuMemCreate still covers
  // what this estimate misses.
  if (missing_bytes > source_->memory_info().free_bytes) return false;
  for (std::size_t stretch = 0; stretch < missing.size(); ++stretch) {
    const auto [address, needed] = missing[stretch];
    if (!source_->map_pages(address, needed / page_bytes_)) {
      // All or nothing: a failed request leaves no pages behind. The pages mapped
      // so far were never handed out, so no kernel can be using them.
      for (std::size_t mapped = 0; mapped < stretch; ++mapped) {
        const auto [mapped_address, mapped_bytes] = missing[mapped];
        source_->unmap_pages(mapped_address, mapped_bytes / page_bytes_);
        blocks_.change_state(mapped_address, mapped_bytes, BlockState::unmapped);
        stats_.record_release(mapped_bytes, mapped_bytes / page_bytes_);
      }
      return false;
    }
    blocks_.change_state(address, needed, BlockState::free);
    stats_.record_reservation(needed, needed / page_bytes_);
  }
  return true;
}

void ExpandableAllocator::release_free_pages() {
  source_->synchronize();
  // Two free blocks are never neighbours (they merge), so unmapping the whole pages
  // inside one free block leaves the other free blocks as they were.
  for (const Block& block : blocks_.free_blocks()) {
    const std::uintptr_t first_page = round_up(block.address, page_bytes_);
    const std::uintptr_t pages_end = block.end() / page_bytes_ * page_bytes_;
    if (first_page >= pages_end) continue;
    const std::size_t bytes = pages_end - first_page;
    source_->unmap_pages(first_page, bytes / page_bytes_);
    blocks_.change_state(first_page, bytes, BlockState::unmapped);
    stats_.record_release(bytes, bytes / page_bytes_);
  }
  std::vector<Segment> empty_segments;
  for (const auto& [address, segment] : blocks_.segments()) {
    const std::vector<Block> first = blocks_.blocks_between(address, address + 1);
    if (first.front().size == segment.size && first.front().state == BlockState::unmapped)
      empty_segments.push_back(segment);
  }
  for (const Segment& segment : empty_segments) {
    source_->free_range(segment.address, segment.size);
    blocks_.remove_segment(segment.address);
  }
}

}  // namespace ladder
