// tests/support/chapter_allocations.hpp - chapters 02 and 03's allocations, call for call,
// without a GPU.
//
// The memory columns of chapters 02 (caching allocator) and 03 (expandable allocator) are a
// function of the sequence of allocate() and deallocate() calls alone, so replaying that
// sequence on fake sources (tests/support/fake_device.hpp) gives them on the CPU:
// tests/cpu/test_allocator_policy.cpp checks them against a measured H200 run, and
// tests/bench/allocator_host_cost.cpp times the allocators on it.
#pragma once

#include <array>
#include <functional>
#include <utility>

#include "common/device_allocator.hpp"

namespace ladder::testing {

/// The (B, N) configurations of chapters 02 and 03 in the committed results:
/// results/latest/02_kv_cache.json's, then its .sweep.json's.
inline constexpr std::array<std::pair<int, int>, 6> chapter02_configurations = {
    {{32, 100}, {32, 200}, {32, 400}, {1, 100}, {8, 100}, {64, 100}}};

/// One generate() of chapters 02 and 03 (chapters/02_kv_cache/kv_cache.cpp), call for call
/// in the chapters' order of allocations and frees, on GPT-2 small's sizes: B BOS prompts,
/// N new tokens, each step's activations fresh blocks, the KV cache grown by one position a
/// step (allocate the longer keys and values, free the old ones), the logits freed at the
/// step's end. A stand-in for running the chapter, which needs a GPU: the allocator's
/// numbers are a function of this sequence alone. Allocates on fake_stream(1).
void run_chapter02_generation(DeviceAllocator& allocator, int B, int N);

/// A configuration of chapter 02 or 03 as the chapter runner measures it
/// (common/chapter_runner.cpp): the cache emptied, one warm-up generation, then `runs` timed
/// ones, each from reset peaks (the counters restart too). `before_run` is called before
/// each timed generation, `after_run` after it, to read what it did. The decoder's cuBLASLt
/// workspace, held throughout, is the caller's to allocate.
void measure_chapter02_configuration(DeviceAllocator& allocator, int B, int N, int runs,
                                     const std::function<void()>& before_run,
                                     const std::function<void()>& after_run);

}  // namespace ladder::testing
