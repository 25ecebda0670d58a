// tests/support/fake_device.cpp - the fake sources' books: a logic_error for anything a
// driver would refuse or an allocator must never ask.
#include "tests/support/fake_device.hpp"

#include <stdexcept>

namespace ladder::testing {

// ---------------------------------------------------------------- the device

bool FakeDevice::grant(std::size_t bytes) {
  if (always_fail) return false;
  if (!scripted_answers.empty()) {
    const bool answer = scripted_answers.front();
    scripted_answers.pop_front();
    if (!answer) return false;
  }
  if (held_bytes + bytes > total_bytes) return false;
  held_bytes += bytes;
  return true;
}

DeviceMemoryInfo FakeDevice::memory_info() {
  ++calls.memory_queries;
  return {total_bytes - held_bytes, total_bytes};
}

bool FakeDevice::is_capturing(cudaStream_t stream) {
  ++calls.capture_queries;
  return capturing_streams.count(stream) != 0;
}

void FakeDevice::record_synchronization() {
  ++synchronizations;
  held_bytes_at_last_synchronization = held_bytes;
}

// ---------------------------------------------------------------- caching: segments

void* FakeSegmentSource::allocate_segment(std::size_t bytes) {
  ++device_.calls.segment_allocations;
  if (!device_.grant(bytes)) return nullptr;
  const std::uintptr_t address = next_address_;
  next_address_ += round_up(bytes, fake_page_bytes) + gap_between_fake_segments;
  device_.segments.emplace(address, bytes);
  return as_pointer(address);
}

void FakeSegmentSource::free_segment(void* address, std::size_t bytes) {
  ++device_.calls.segment_frees;
  const auto segment = device_.segments.find(address_of(address));
  if (segment == device_.segments.end() || segment->second != bytes)
    throw std::logic_error("fake: free_segment of something never allocated");
  device_.held_bytes -= bytes;
  device_.segments.erase(segment);
}

// ---------------------------------------------------------------- expandable: ranges and pages

std::uintptr_t FakePageSource::reserve_range(std::size_t bytes) {
  ++device_.calls.range_reservations;
  if (bytes % fake_page_bytes != 0) throw std::logic_error("fake: range not whole pages");
  const std::uintptr_t address = next_address_;
  next_address_ += bytes + gap_between_fake_segments;
  device_.ranges.emplace(address, bytes);
  return address;
}

void FakePageSource::free_range(std::uintptr_t address, std::size_t bytes) {
  ++device_.calls.range_frees;
  const auto range = device_.ranges.find(address);
  if (range == device_.ranges.end() || range->second != bytes)
    throw std::logic_error("fake: free_range of something never reserved");
  const auto mapped = device_.mapped_pages.lower_bound(address);
  if (mapped != device_.mapped_pages.end() && *mapped < address + bytes)
    throw std::logic_error("fake: free_range while pages are still mapped");
  device_.ranges.erase(range);
}

bool FakePageSource::map_pages(std::uintptr_t address, std::size_t page_count) {
  ++device_.calls.page_mappings;
  for (std::size_t page = 0; page < page_count; ++page) {
    const std::uintptr_t page_address = address + page * fake_page_bytes;
    if (device_.mapped_pages.count(page_address) != 0 || !inside_a_range(page_address))
      throw std::logic_error("fake: page mapped twice, or outside any reserved range");
  }
  if (!device_.grant(page_count * fake_page_bytes)) return false;
  for (std::size_t page = 0; page < page_count; ++page)
    device_.mapped_pages.insert(address + page * fake_page_bytes);
  device_.calls.pages_mapped += page_count;
  return true;
}

void FakePageSource::unmap_pages(std::uintptr_t address, std::size_t page_count) {
  ++device_.calls.page_unmappings;
  for (std::size_t page = 0; page < page_count; ++page) {
    if (device_.mapped_pages.erase(address + page * fake_page_bytes) == 0)
      throw std::logic_error("fake: unmapping a page that is not mapped");
  }
  device_.held_bytes -= page_count * fake_page_bytes;
  device_.calls.pages_unmapped += page_count;
}

bool FakePageSource::inside_a_range(std::uintptr_t page_address) const {
  auto range = device_.ranges.upper_bound(page_address);
  if (range == device_.ranges.begin()) return false;
  --range;
  return page_address + fake_page_bytes <= range->first + range->second;
}

}  // namespace ladder::testing
