// tests/support/chapter_allocations.cpp - the replay of chapters 02 and 03's allocations.
#include "tests/support/chapter_allocations.hpp"

#include <cstdint>
#include <utility>
#include <vector>

#include "common/chapter_runner.hpp"
#include "tests/support/fake_device.hpp"

namespace ladder::testing {

void run_chapter02_generation(DeviceAllocator& allocator, int B, int N) {
  constexpr std::size_t C = 768, V = 50257;
  constexpr int layers = 12;
  const cudaStream_t stream = fake_stream(1);
  const std::size_t rows = static_cast<std::size_t>(B);  // T = 1: the prefill has B rows too
  const auto buffer = [&](std::size_t bytes) { return DeviceBuffer(allocator, bytes, stream); };
  const DeviceBuffer sequence = buffer(rows * sizeof(std::int32_t));
  // GreedyBuffers: finished, all_finished, generated (no forced tokens)
  const DeviceBuffer finished = buffer(rows * sizeof(std::int32_t));
  const DeviceBuffer all_finished = buffer(sizeof(std::int32_t));
  const DeviceBuffer generated = buffer(rows * N * sizeof(std::int32_t));
  std::vector<DeviceBuffer> keys, values;
  DeviceBuffer next_tokens;
  const std::size_t row_bytes = rows * C * sizeof(float);
  for (int step = 0; step < N; ++step) {
    const std::size_t cached = static_cast<std::size_t>(step);  // L: positions in the cache
    DeviceBuffer logits;
    {
      const DeviceBuffer hidden = buffer(row_bytes);  // prefill(): [B, T, C]; decode_step(): [B, C]
      for (int layer = 0; layer < layers; ++layer) {
        {  // the attention block
          const DeviceBuffer normed = buffer(row_bytes);
          const DeviceBuffer qkv = buffer(3 * row_bytes);
          if (step == 0) {  // prefill: this layer's keys and values of position 0 stay
            keys.push_back(buffer(row_bytes));
            values.push_back(buffer(row_bytes));
          } else {  // grow_kv_cache(): one position longer, the old ones freed
            DeviceBuffer longer_keys = buffer(row_bytes * (cached + 1));
            DeviceBuffer longer_values = buffer(row_bytes * (cached + 1));
            keys[layer] = std::move(longer_keys);
            values[layer] = std::move(longer_values);
          }
          const DeviceBuffer attended = buffer(row_bytes);
          const DeviceBuffer projected = buffer(row_bytes);
        }
        {  // the MLP block
          const DeviceBuffer normed = buffer(row_bytes);
          const DeviceBuffer expanded = buffer(4 * row_bytes);
          const DeviceBuffer projected = buffer(row_bytes);
        }
      }
      const DeviceBuffer normed = buffer(row_bytes);  // lm_head(): ln_f, then the logits
      logits = buffer(rows * V * sizeof(float));
    }  // hidden and ln_f's output freed as prefill() / decode_step() return
    next_tokens = buffer(rows * sizeof(std::int32_t));
  }  // the step's logits are freed at the end of each step, here the last
  // generate() returns: next_tokens, the cache (values, then keys), the greedy buffers and
  // the prompts go, in reverse order of declaration
  next_tokens = DeviceBuffer();
  values.clear();
  keys.clear();
}

void measure_chapter02_configuration(DeviceAllocator& allocator, int B, int N, int runs,
                                     const std::function<void()>& before_run,
                                     const std::function<void()>& after_run) {
  start_from_empty_cache(allocator);
  run_chapter02_generation(allocator, B, N);  // warm-up
  for (int run = 0; run < runs; ++run) {
    before_run();
    allocator.reset_peak_stats();
    run_chapter02_generation(allocator, B, N);
    after_run();
  }
}

}  // namespace ladder::testing
