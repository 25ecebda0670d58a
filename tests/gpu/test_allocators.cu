// tests/gpu/test_allocators.cu - both device allocators on a real GPU.
//
// What the CPU tests (tests/cpu/test_allocator_policy.cpp) cannot show: that the
// memory is really there and really apart. Every live block is filled with its own
// byte pattern by a kernel and checked later, so two blocks that overlapped would
// overwrite each other; the driver's count of free memory must match the
// allocator's reserved bytes and come back whole at teardown; out-of-memory must
// throw DeviceOutOfMemory with a message a user can act on; and the growing KV cache
// of chapter 02 must fragment the caching allocator and not the expandable one.
// Run: gpu_tests "[allocator]"
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/block_pool.hpp"
#include "common/caching_allocator.hpp"
#include "common/cuda_check.hpp"
#include "common/device_allocator.hpp"
#include "common/expandable_allocator.hpp"
#include "tests/gpu/device_test_helpers.hpp"
#include "tests/support/allocator_checks.hpp"

using namespace ladder;

namespace {

// ---------------------------------------------------------------- byte patterns

// Byte `index` of the pattern tagged `tag`: a hash, so two overlapping blocks
// disagree on almost every shared byte whatever their offsets.
__device__ unsigned char pattern_byte(std::uint32_t tag, std::size_t index) {
  std::uint32_t mixed = tag * 0x9E3779B1u ^ static_cast<std::uint32_t>(index) * 0x85EBCA77u ^
                        static_cast<std::uint32_t>(index >> 32);
  mixed ^= mixed >> 15;
  mixed *= 0x2C1B3C6Du;
  mixed ^= mixed >> 12;
  return static_cast<unsigned char>(mixed);
}

// data[i] = pattern_byte(tag, first_index + i) for i < bytes; grid-stride loop.
__global__ void fill_pattern_kernel(unsigned char* data, std::size_t bytes, std::size_t first_index,
                                    std::uint32_t tag) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += stride)
    data[i] = pattern_byte(tag, first_index + i);
}

// Adds to *mismatches the number of bytes i < bytes with data[i] != pattern_byte(tag, i).
__global__ void count_mismatches_kernel(const unsigned char* data, std::size_t bytes,
                                        std::uint32_t tag, unsigned long long* mismatches) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += stride)
    local += data[i] != pattern_byte(tag, i) ? 1 : 0;
  if (local != 0) atomicAdd(mismatches, local);
}

constexpr unsigned int pattern_threads = 256;

unsigned int pattern_blocks(std::size_t bytes) {
  constexpr std::size_t most_blocks = 4096;  // enough to fill an H200; the loop does the rest
  const std::size_t needed = (bytes + pattern_threads - 1) / pattern_threads;
  return static_cast<unsigned int>(needed < most_blocks ? needed : most_blocks);
}

// Writes and checks patterns; owns the device counter of mismatching bytes. No
// synchronization after the launches: the stress wants kernels still running while
// blocks are freed and handed out again, and errors surface at mismatches().
class PatternChecker {
 public:
  PatternChecker() {
    CUDA_CHECK(cudaMalloc(&mismatches_, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(mismatches_, 0, sizeof(unsigned long long)));
  }
  ~PatternChecker() { cudaFree(mismatches_); }  // a destructor must not throw
  PatternChecker(const PatternChecker&) = delete;
  PatternChecker& operator=(const PatternChecker&) = delete;

  void fill(void* data, std::size_t bytes, std::size_t first_index, std::uint32_t tag,
            cudaStream_t stream) const {
    if (bytes == 0) return;
    fill_pattern_kernel<<<pattern_blocks(bytes), pattern_threads, 0, stream>>>(
        static_cast<unsigned char*>(data), bytes, first_index, tag);
    CUDA_CHECK(cudaGetLastError());
  }
  void check(const void* data, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) const {
    if (bytes == 0) return;
    count_mismatches_kernel<<<pattern_blocks(bytes), pattern_threads, 0, stream>>>(
        static_cast<const unsigned char*>(data), bytes, tag, mismatches_);
    CUDA_CHECK(cudaGetLastError());
  }
  /// Waits for the device, returns the mismatching bytes counted so far and restarts from 0.
  unsigned long long mismatches() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    unsigned long long count = 0;
    CUDA_CHECK(cudaMemcpy(&count, mismatches_, sizeof count, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemset(mismatches_, 0, sizeof(unsigned long long)));
    return count;
  }

 private:
  unsigned long long* mismatches_ = nullptr;
};

std::size_t device_free_bytes() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

// Bytes that left the device's free memory since `free_before` (negative if it grew).
std::int64_t bytes_used_since(std::size_t free_before) {
  return static_cast<std::int64_t>(free_before) - static_cast<std::int64_t>(device_free_bytes());
}

std::size_t device_total_bytes() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

// The driver keeps a little memory of its own (page tables, lazily loaded kernels):
// free memory seen by cudaMemGetInfo may differ from our books by this much.
constexpr std::int64_t driver_slack_bytes = 64 * static_cast<std::int64_t>(mebibytes);

// The driver's view agrees with the allocator's books: what left the free memory
// since `free_before` is what the allocator says it reserved.
void check_driver_agrees(std::size_t free_before, std::size_t reserved_bytes) {
  const std::int64_t used = bytes_used_since(free_before);
  const auto reserved = static_cast<std::int64_t>(reserved_bytes);
  INFO("driver: " << used << " bytes used; allocator: " << reserved << " bytes reserved");
  CHECK(used >= reserved - driver_slack_bytes);
  CHECK(used <= reserved + driver_slack_bytes);
}

// Loads the pattern kernels (CUDA loads modules lazily, into device memory) so that
// later free-memory readings do not count them.
void load_pattern_kernels(const PatternChecker& checker, cudaStream_t stream) {
  std::unique_ptr<DeviceAllocator> scratch = make_device_allocator("caching");
  void* block = scratch->allocate(512, stream);
  checker.fill(block, 512, 0, 1, stream);
  checker.check(block, 512, 1, stream);
  REQUIRE(checker.mismatches() == 0);
  scratch->deallocate(block);
}

struct LiveBlock {
  std::size_t bytes = 0;
  std::uint32_t tag = 0;
  cudaStream_t stream = nullptr;
};

}  // namespace

// ================================================================ stress

TEMPLATE_TEST_CASE("allocators on the device: random stress keeps every block intact",
                   "[allocator][gpu]", CachingAllocator, ExpandableAllocator) {
  const PatternChecker checker;
  const test::DeviceStream stream_a;
  const test::DeviceStream stream_b;
  load_pattern_kernels(checker, stream_a.get());
  const std::size_t free_before = device_free_bytes();
  {
    TestType allocator;
    const std::uint32_t seed = test::fresh_seed();
    INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
    std::mt19937_64 random(seed);
    // Sizes spread evenly in log space, from 1 byte to 300 MiB.
    std::uniform_real_distribution<double> log_size(0.0, std::log(300.0 * mebibytes));
    std::uniform_int_distribution<int> percent(0, 99);
    constexpr std::size_t live_budget_bytes = std::size_t{16} << 30;

    std::map<std::uintptr_t, std::size_t> live_bytes;  // what allocator_checks.hpp reads
    std::map<std::uintptr_t, LiveBlock> live;
    std::size_t live_total = 0;
    const auto free_one = [&](std::size_t index) {
      auto victim = live.begin();
      std::advance(victim, static_cast<std::ptrdiff_t>(index % live.size()));
      allocator.deallocate(as_pointer(victim->first));
      live_total -= victim->second.bytes;
      live_bytes.erase(victim->first);
      live.erase(victim);
    };
    const auto verify_all = [&] {
      for (const auto& [address, block] : live)
        checker.check(as_pointer(address), block.bytes, block.tag, block.stream);
      REQUIRE(checker.mismatches() == 0);
      check_driver_agrees(free_before, testing::check_bookkeeping(allocator, live_bytes));
    };

    constexpr int operations = 3000;
    for (int operation = 1; operation <= operations; ++operation) {
      if (!live.empty() && percent(random) < 45) {
        free_one(static_cast<std::size_t>(random()));
      } else {
        const auto bytes = static_cast<std::size_t>(std::exp(log_size(random)));
        while (!live.empty() && live_total + bytes > live_budget_bytes)
          free_one(static_cast<std::size_t>(random()));
        const cudaStream_t stream = percent(random) < 50 ? stream_a.get() : stream_b.get();
        void* pointer = allocator.allocate(bytes, stream);
        testing::add_live_block(live_bytes, pointer, bytes);
        const auto tag = static_cast<std::uint32_t>(operation);
        live.emplace(reinterpret_cast<std::uintptr_t>(pointer), LiveBlock{bytes, tag, stream});
        live_total += bytes;
        checker.fill(pointer, bytes, 0, tag, stream);
      }
      // empty_cache() with live blocks must give back only what is free.
      if (operation % 1000 == 0) allocator.empty_cache();
      if (operation % 250 == 0) verify_all();
    }
    verify_all();
    while (!live.empty()) free_one(0);
    CHECK(allocator.stats().allocated_bytes == 0);
    CHECK(allocator.stats().allocations > 0);
    CHECK(allocator.stats().driver_allocations > 0);
    allocator.empty_cache();
    CHECK(allocator.stats().reserved_bytes == 0);
    check_driver_agrees(free_before, 0);
  }
  check_driver_agrees(free_before, 0);
}

TEMPLATE_TEST_CASE("allocators on the device: teardown returns cached memory to the driver",
                   "[allocator][gpu]", CachingAllocator, ExpandableAllocator) {
  const PatternChecker checker;
  const test::DeviceStream stream;
  load_pattern_kernels(checker, stream.get());
  const std::size_t free_before = device_free_bytes();
  {
    TestType allocator;
    std::vector<void*> blocks;
    for (std::size_t bytes : {std::size_t{100}, 3 * mebibytes, 50 * mebibytes, 700 * mebibytes})
      blocks.push_back(allocator.allocate(bytes, stream.get()));
    for (void* block : blocks) allocator.deallocate(block);
    CHECK(allocator.stats().reserved_bytes >= 753 * mebibytes);
    check_driver_agrees(free_before, allocator.stats().reserved_bytes);
  }  // destroyed with everything still cached
  check_driver_agrees(free_before, 0);
}

// ================================================================ out of memory

TEST_CASE("allocators on the device: an impossible request throws DeviceOutOfMemory",
          "[allocator][gpu]") {
  const std::string name = GENERATE(as<std::string>{}, "caching", "expandable");
  const PatternChecker checker;
  const test::DeviceStream stream;
  std::unique_ptr<DeviceAllocator> allocator = make_device_allocator(name);
  void* kept = allocator->allocate(10 * mebibytes, stream.get());

  const std::size_t total = device_total_bytes();
  for (const std::size_t asked : {4 * total, device_free_bytes() + 512 * mebibytes}) {
    INFO(name << " allocator asked for " << format_bytes(static_cast<double>(asked)));
    const std::string message = testing::check_out_of_memory(*allocator, asked, stream.get());
    CHECK_THAT(message, Catch::Matchers::Contains("GPU has"));
    // The failed request leaves no error behind for the next CUDA call to trip over.
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(allocator->stats().allocated_bytes == 10 * mebibytes);
  }
  // The allocator still works, and the kept block is intact.
  checker.fill(kept, 10 * mebibytes, 0, 7, stream.get());
  void* after = allocator->allocate(64 * mebibytes, stream.get());
  checker.fill(after, 64 * mebibytes, 0, 8, stream.get());
  checker.check(kept, 10 * mebibytes, 7, stream.get());
  checker.check(after, 64 * mebibytes, 8, stream.get());
  CHECK(checker.mismatches() == 0);
  allocator->deallocate(after);
  allocator->deallocate(kept);
}

// ================================================================ growing KV cache

namespace {

struct GrowingCacheResult {
  AllocatorStats stats;  // at the end of the last step, before the cache is freed
  unsigned long long mismatches = 0;
};

// Chapter 02's KV cache at the real workload's size: batch 32, 12 layers with a key
// and a value tensor each (12 heads x 64 floats per position). Every step, as Hugging
// Face's dynamic cache does with torch.cat, each tensor gets a buffer one position
// longer, the old contents are copied in, the new position is written, and the old
// buffer is freed. At the end every tensor must hold exactly what was written.
GrowingCacheResult run_growing_kv_cache(DeviceAllocator& allocator, const PatternChecker& checker,
                                        cudaStream_t stream, int max_length) {
  constexpr std::size_t bytes_per_position = std::size_t{32} * 12 * 64 * sizeof(float);
  constexpr int tensors = 12 * 2;
  std::vector<void*> cache(tensors);
  for (int tensor = 0; tensor < tensors; ++tensor) {
    cache[tensor] = allocator.allocate(bytes_per_position, stream);
    checker.fill(cache[tensor], bytes_per_position, 0, static_cast<std::uint32_t>(tensor), stream);
  }
  for (int length = 1; length <= max_length; ++length) {
    const std::size_t old_bytes = bytes_per_position * static_cast<std::size_t>(length);
    for (int tensor = 0; tensor < tensors; ++tensor) {
      void* longer = allocator.allocate(old_bytes + bytes_per_position, stream);
      CUDA_CHECK(
          cudaMemcpyAsync(longer, cache[tensor], old_bytes, cudaMemcpyDeviceToDevice, stream));
      checker.fill(static_cast<unsigned char*>(longer) + old_bytes, bytes_per_position, old_bytes,
                   static_cast<std::uint32_t>(tensor), stream);
      allocator.deallocate(cache[tensor]);  // stream-ordered: the copy above still reads it
      cache[tensor] = longer;
    }
  }
  GrowingCacheResult result;
  result.stats = allocator.stats();
  const std::size_t final_bytes = bytes_per_position * static_cast<std::size_t>(max_length + 1);
  for (int tensor = 0; tensor < tensors; ++tensor)
    checker.check(cache[tensor], final_bytes, static_cast<std::uint32_t>(tensor), stream);
  result.mismatches = checker.mismatches();
  for (void* tensor : cache) allocator.deallocate(tensor);
  return result;
}

}  // namespace

TEST_CASE("allocators on the device: a growing KV cache fragments caching, not expandable",
          "[allocator][gpu]") {
  const PatternChecker checker;
  const test::DeviceStream stream;
  constexpr int max_length = 400;
  GrowingCacheResult caching;
  GrowingCacheResult expandable;
  {
    CachingAllocator allocator;
    caching = run_growing_kv_cache(allocator, checker, stream.get(), max_length);
  }
  {
    ExpandableAllocator allocator;
    expandable = run_growing_kv_cache(allocator, checker, stream.get(), max_length);
  }
  const auto report = [](const char* name, const AllocatorStats& stats) {
    std::printf(
        "growing KV cache, B = 32, N = %d, %-10s: peak reserved %10s, peak allocated "
        "%10s, fragmentation %5.1f%%, driver allocations %llu\n",
        max_length, name, format_bytes(static_cast<double>(stats.peak_reserved_bytes)).c_str(),
        format_bytes(static_cast<double>(stats.peak_allocated_bytes)).c_str(),
        100.0 * stats.fragmentation(), static_cast<unsigned long long>(stats.driver_allocations));
  };
  report("caching", caching.stats);
  report("expandable", expandable.stats);
  CHECK(caching.mismatches == 0);
  CHECK(expandable.mismatches == 0);
  CHECK(caching.stats.fragmentation() > 0.5);
  CHECK(expandable.stats.fragmentation() < 0.15);
  CHECK(expandable.stats.peak_reserved_bytes <= 2 * expandable.stats.peak_allocated_bytes);
}
