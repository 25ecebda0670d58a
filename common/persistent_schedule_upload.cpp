// common/persistent_schedule_upload.cpp - see persistent_schedule_upload.hpp.
#include "common/persistent_schedule_upload.hpp"

#include <cstring>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"

namespace ladder {

namespace {

/// Bytes of `count` elements of T, rounded up to 16 so that every array stays aligned.
template <typename T>
std::size_t aligned_bytes(std::size_t count) {
  return (count * sizeof(T) + 15) / 16 * 16;
}

}  // namespace

PersistentScheduleOnDevice::PersistentScheduleOnDevice(PersistentSchedule schedule)
    : schedule_(std::move(schedule)) {
  const PersistentSchedule& s = schedule_;
  const std::size_t instruction_bytes = aligned_bytes<PersistentInstruction>(s.instructions.size());
  const std::size_t wait_bytes = aligned_bytes<CounterWait>(s.waits.size());
  const std::size_t first_bytes = aligned_bytes<std::int32_t>(s.block_first.size());
  const std::size_t list_bytes = aligned_bytes<std::int32_t>(s.block_instructions.size());
  const std::size_t counter_bytes = aligned_bytes<std::uint32_t>(s.counter_arrivals.size());
  const std::size_t total =
      instruction_bytes + wait_bytes + first_bytes + list_bytes + counter_bytes;
  memory_ = allocate_device_memory(total, "the persistent kernel's schedule");

  // One host image of every array but the counters, one copy.
  std::vector<unsigned char> image(total - counter_bytes, 0);
  std::size_t at = 0;
  const auto put = [&](const void* data, std::size_t bytes, std::size_t padded) {
    if (bytes > 0) std::memcpy(image.data() + at, data, bytes);
    const std::size_t offset = at;
    at += padded;
    return static_cast<unsigned char*>(memory_) + offset;
  };
  auto* device_instructions =
      put(s.instructions.data(), s.instructions.size() * sizeof(PersistentInstruction),
          instruction_bytes);
  auto* device_waits = put(s.waits.data(), s.waits.size() * sizeof(CounterWait), wait_bytes);
  auto* device_first =
      put(s.block_first.data(), s.block_first.size() * sizeof(std::int32_t), first_bytes);
  auto* device_list = put(s.block_instructions.data(),
                          s.block_instructions.size() * sizeof(std::int32_t), list_bytes);
  upload_and_wait(memory_, image.data(), image.size());

  view_.instructions = reinterpret_cast<const PersistentInstruction*>(device_instructions);
  view_.waits = reinterpret_cast<const CounterWait*>(device_waits);
  view_.block_first = reinterpret_cast<const std::int32_t*>(device_first);
  view_.block_instructions = reinterpret_cast<const std::int32_t*>(device_list);
  view_.counters = reinterpret_cast<std::uint32_t*>(static_cast<unsigned char*>(memory_) + at);
  view_.stop_counter = s.stop_counter;
  view_.blocks = s.shape.blocks;
}

PersistentScheduleOnDevice::~PersistentScheduleOnDevice() { static_cast<void>(cudaFree(memory_)); }

void PersistentScheduleOnDevice::reset_counters(cudaStream_t stream) const {
  CUDA_CHECK(cudaMemsetAsync(view_.counters, 0,
                             schedule_.counter_arrivals.size() * sizeof(std::uint32_t), stream));
}

}  // namespace ladder
