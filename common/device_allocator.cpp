// common/device_allocator.cpp - picks a device allocator by name.
#include "common/device_allocator.hpp"

#include <stdexcept>

#include "common/caching_allocator.hpp"
#include "common/expandable_allocator.hpp"

namespace ladder {

std::unique_ptr<DeviceAllocator> make_device_allocator(const std::string& name) {
  if (name == "caching") return std::make_unique<CachingAllocator>();
  if (name == "expandable") return std::make_unique<ExpandableAllocator>();
  throw std::invalid_argument("unknown allocator \"" + name +
                              "\"; choose \"caching\" or \"expandable\"");
}

}  // namespace ladder
