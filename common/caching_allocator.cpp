// common/caching_allocator.cpp - segments from cudaMalloc, blocks cached per stream.
#include "common/caching_allocator.hpp"

#include <string>
#include <utility>

#include "common/cuda_check.hpp"

namespace ladder {

namespace {

class CudaMallocSegmentSource final : public SegmentSource {
 public:
  CudaMallocSegmentSource() { CUDA_CHECK(cudaGetDevice(&device_)); }

  void* allocate_segment(std::size_t bytes) override {
    require_own_device_current();
    void* address = nullptr;
    const cudaError_t status = cudaMalloc(&address, bytes);
    if (status == cudaErrorMemoryAllocation) {
      // Not sticky, but it stays the "last error" until read; clear it so later
      // checks of cudaGetLastError() do not blame an unrelated kernel.
      static_cast<void>(cudaGetLastError());
      return nullptr;
    }
    CUDA_CHECK(status);
    return address;
  }

  void free_segment(void* address, std::size_t /*bytes*/) override {
    require_own_device_current();
    CUDA_CHECK(cudaFree(address));
  }

  void synchronize() override { CUDA_CHECK(cudaDeviceSynchronize()); }

  DeviceMemoryInfo memory_info() override { return query_device_memory(); }

  bool is_capturing(cudaStream_t stream) override { return ::ladder::stream_is_capturing(stream); }

 private:
  // cudaMalloc allocates on the current device; memory landing on another GPU than
  // the one whose blocks we cache would be a silent, hard-to-find bug.
  void require_own_device_current() const {
    int current = 0;
    CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_) {
      throw CudaError("caching allocator made for device " + std::to_string(device_) +
                      " used while device " + std::to_string(current) +
                      " is current; make one allocator per device");
    }
  }

  int device_ = 0;
};

}  // namespace

std::size_t caching_segment_bytes(std::size_t rounded_bytes) {
  if (rounded_bytes <= small_request_limit_bytes) return small_segment_bytes;
  if (rounded_bytes <= shared_large_segment_limit_bytes) return large_segment_bytes;
  return round_up(rounded_bytes, own_segment_rounding_bytes);
}

std::unique_ptr<SegmentSource> make_cuda_malloc_segment_source() {
  return std::make_unique<CudaMallocSegmentSource>();
}

CachingAllocator::CachingAllocator() : CachingAllocator(make_cuda_malloc_segment_source()) {}

CachingAllocator::CachingAllocator(std::unique_ptr<SegmentSource> source)
    : source_(std::move(source)) {}

CachingAllocator::~CachingAllocator() {
  const AllocatorTeardown teardown("caching allocator");
  teardown.warn_if_allocated(stats_.stats(), "freed memory");
  // cudaFree waits for the device too, but only as a documented side effect.
  teardown.attempt([&] { source_->synchronize(); });
  for (const auto& [address, segment] : blocks_.segments())
    teardown.attempt([&] { source_->free_segment(as_pointer(address), segment.size); });
}

void* CachingAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  require_not_capturing(source_->is_capturing(stream), "caching allocator", bytes);
  const std::size_t rounded_bytes = round_request(bytes);
  const PoolKind pool = pool_for(rounded_bytes);
  const Block* cached = blocks_.best_fit(pool, stream, rounded_bytes);
  const std::uintptr_t free_block_address =
      cached != nullptr ? cached->address : add_segment(bytes, rounded_bytes, pool, stream);
  const Block& block = blocks_.allocate(free_block_address, rounded_bytes, BlockPlacement::low_end);
  // Counted at the block's size, unsplit rest included, as torch.cuda.memory_allocated
  // does: that memory is unavailable to anyone else while the block lives.
  stats_.record_allocation(block.size);
  return as_pointer(block.address);
}

void CachingAllocator::deallocate(void* pointer) {
  if (pointer == nullptr) return;
  stats_.record_deallocation(blocks_.deallocate(reinterpret_cast<std::uintptr_t>(pointer)));
}

void CachingAllocator::empty_cache() { release_free_segments(); }

std::uintptr_t CachingAllocator::add_segment(std::size_t asked_bytes, std::size_t rounded_bytes,
                                             PoolKind pool, cudaStream_t stream) {
  const std::size_t segment_bytes = caching_segment_bytes(rounded_bytes);
  void* address = source_->allocate_segment(segment_bytes);
  if (address == nullptr) {
    release_free_segments();
    address = source_->allocate_segment(segment_bytes);
  }
  if (address == nullptr) {
    throw DeviceOutOfMemory(
        out_of_memory_message(asked_bytes, rounded_bytes, stats_.stats(), source_->memory_info()));
  }
  const auto segment_address = reinterpret_cast<std::uintptr_t>(address);
  blocks_.add_segment(segment_address, segment_bytes, stream, pool, BlockState::free);
  stats_.record_reservation(segment_bytes, 1);
  return segment_address;
}

void CachingAllocator::release_free_segments() {
  source_->synchronize();
  // Only a segment that is one free block can go: cudaFree takes whole segments.
  for (const Block& block : blocks_.free_blocks()) {
    if (block.size != blocks_.segments().at(block.segment_address).size) continue;
    source_->free_segment(as_pointer(block.address), block.size);
    blocks_.remove_segment(block.address);
    stats_.record_release(block.size, 1);
  }
}

}  // namespace ladder
