// common/device_allocator.cpp - picks a device allocator by name; how allocators tear down;
// the device memory query both real allocators report.
#include "common/device_allocator.hpp"

#include <cstdio>
#include <stdexcept>

#include "common/caching_allocator.hpp"
#include "common/cuda_check.hpp"
#include "common/expandable_allocator.hpp"

namespace ladder {

DeviceMemoryInfo query_device_memory() {
  DeviceMemoryInfo memory;
  CUDA_CHECK(cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes));
  return memory;
}

void AllocatorTeardown::warn_if_allocated(const AllocatorStats& last,
                                          const char* consequence) const {
  if (last.allocated_bytes == 0) return;
  std::fprintf(
      stderr, "warning: %s destroyed while %s are still allocated; their buffers point to %s\n",
      allocator_, format_bytes(static_cast<double>(last.allocated_bytes)).c_str(), consequence);
}

void AllocatorTeardown::report(const std::exception& error) const {
  std::fprintf(stderr, "%s teardown: %s\n", allocator_, error.what());
}

std::unique_ptr<DeviceAllocator> make_device_allocator(const std::string& name) {
  if (name == "caching") return std::make_unique<CachingAllocator>();
  if (name == "expandable") return std::make_unique<ExpandableAllocator>();
  throw std::invalid_argument("unknown allocator \"" + name +
                              "\"; choose \"caching\" or \"expandable\"");
}

}  // namespace ladder
