// tests/gpu/greedy_step_buffers.hpp - the device buffers greedy decoding carries from one
// argmax step to the next, for the tests of kernels/sampling and of the graph loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/sampling.cuh"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder::test {

/// The shape of a greedy decode and the device buffers its steps carry from one to the
/// next; no row is finished at first.
struct StepBuffers {
  StepBuffers(int batch, int vocabulary, int steps, int eos)
      : B(batch),
        V(vocabulary),
        max_steps(steps),
        eos_id(eos),
        next_tokens(B),
        finished(std::vector<std::int32_t>(B, 0)),
        all_finished(1),
        output_tokens(static_cast<std::size_t>(B) * max_steps) {}

  /// launch_argmax_step on logits [B, V] at `step` (feeding forced [B, max_steps] where it is
  /// not null), then waits for `stream`.
  void run_step(const float* logits, int step, const DeviceStream& stream,
                const std::int32_t* forced = nullptr) {
    launch_argmax_step(logits, next_tokens.get(), state(forced), B, V, step, stream.get());
    stream.synchronize();
  }

  /// What the launchers take besides the logits and next_tokens.
  GreedyState state(const std::int32_t* forced = nullptr) const {
    return {forced, finished.get(), all_finished.get(), output_tokens.get(), max_steps, eos_id};
  }

  int B;
  int V;
  int max_steps;
  int eos_id;
  DeviceArray<std::int32_t> next_tokens;
  DeviceArray<std::int32_t> finished;
  DeviceArray<std::int32_t> all_finished;
  DeviceArray<std::int32_t> output_tokens;
};

}  // namespace ladder::test
