// tests/gpu/test_sampling.cpp - kernels/sampling (greedy step) against reference::argmax
// and the repository's stopping rule.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/sampling.cuh"
#include "tests/gpu/device_test_helpers.hpp"
#include "tests/gpu/greedy_step_buffers.hpp"

namespace ladder {
namespace {

using test::StepBuffers;

/// Logits [B, V] in [-1, 1) whose row b peaks at winners[b] (value 5).
std::vector<float> logits_with_winners(std::mt19937& rng, int V,
                                       const std::vector<std::int32_t>& winners) {
  const std::size_t B = winners.size();
  std::vector<float> logits = test::random_uniform(rng, B * V, -1.0f, 1.0f);
  for (std::size_t b = 0; b < B; ++b) logits[b * V + winners[b]] = 5.0f;
  return logits;
}

TEST_CASE("launch_argmax_step picks torch.argmax's token, ties to the smallest index",
          "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int max_steps = 3;
  const int step = 1;
  const int eos_id = 11;

  for (const int V : {97, 50257}) {
    for (const int B : {1, 3, 37}) {
      CAPTURE(B, V);
      std::vector<float> logits =
          test::random_uniform(rng, static_cast<std::size_t>(B) * V, -5.0f, 5.0f);
      std::vector<std::int32_t> planted(B, -1);  // the expected winner where one is planted
      for (int b = 0; b < B; ++b) {
        float* row = logits.data() + static_cast<std::size_t>(b) * V;
        const int first = test::random_ints(rng, 1, 0, V - 2)[0];
        const int second = test::random_ints(rng, 1, first + 1, V - 1)[0];
        switch (b % 5) {
          case 0:  // a two-way tie for the maximum
            row[first] = row[second] = 10.0f;
            planted[b] = first;
            break;
          case 1:  // a three-way tie, the first one at index 0
            row[0] = row[V / 2] = row[V - 1] = 10.0f;
            planted[b] = 0;
            break;
          case 2:  // maximum at the last index
            row[V - 1] = 10.0f;
            planted[b] = V - 1;
            break;
          case 3:  // ties below the maximum do not matter
            row[first] = row[second] = 7.0f;
            row[V / 2] = 8.0f;
            planted[b] = V / 2;
            break;
          default:  // no plant: whatever the random row gives
            break;
        }
      }
      const test::DeviceArray<float> logits_device(logits);
      StepBuffers buffers(B, V, max_steps, eos_id);
      buffers.next_tokens.poison();
      buffers.all_finished.poison();
      buffers.output_tokens.poison();
      buffers.run_step(logits_device.get(), step, stream);

      const std::vector<std::int32_t> next_tokens = buffers.next_tokens.download();
      const std::vector<std::int32_t> finished = buffers.finished.download();
      const std::vector<std::int32_t> output_tokens = buffers.output_tokens.download();
      bool every_row_finished = true;
      for (int b = 0; b < B; ++b) {
        CAPTURE(b);
        const int expected = reference::argmax(logits.data() + static_cast<std::size_t>(b) * V, V);
        if (planted[b] >= 0) REQUIRE(expected == planted[b]);  // the oracle agrees with the plan
        CHECK(next_tokens[b] == expected);
        for (int s = 0; s < max_steps; ++s) {
          const std::int32_t written = output_tokens[static_cast<std::size_t>(b) * max_steps + s];
          CHECK(written == (s == step ? expected : -1));  // other steps keep the poison
        }
        const std::int32_t expected_finished = expected == eos_id ? 1 : 0;
        CHECK(finished[b] == expected_finished);
        every_row_finished = every_row_finished && expected_finished == 1;
      }
      CHECK(buffers.all_finished.download()[0] == (every_row_finished ? 1 : 0));
    }
  }
}

TEST_CASE("launch_argmax_step keeps finished rows finished and raises all_finished last",
          "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int V = 97;
  const int eos_id = 13;
  const int max_steps = 4;

  SECTION("five rows, two of them finished before the first step") {
    StepBuffers buffers(/*batch=*/5, V, max_steps, eos_id);
    buffers.output_tokens.poison();
    buffers.finished.upload({1, 0, 0, 0, 1});

    // Step 0: row 0 (finished earlier) emits 5 and stays finished; rows 1 and 3 emit
    // EOS; row 2 emits 7 and is still running; row 4 (finished earlier) emits EOS again.
    const test::DeviceArray<float> step_0(
        logits_with_winners(rng, V, {5, eos_id, 7, eos_id, eos_id}));
    buffers.all_finished.poison();
    buffers.run_step(step_0.get(), 0, stream);
    CHECK(buffers.next_tokens.download() ==
          std::vector<std::int32_t>{5, eos_id, 7, eos_id, eos_id});
    CHECK(buffers.finished.download() == std::vector<std::int32_t>{1, 1, 0, 1, 1});
    CHECK(buffers.all_finished.download() == std::vector<std::int32_t>{0});

    // Step 1: row 2 emits EOS; every other row emits something else and stays finished.
    const test::DeviceArray<float> step_1(logits_with_winners(rng, V, {3, 4, eos_id, 6, 0}));
    buffers.all_finished.poison();
    buffers.run_step(step_1.get(), 1, stream);
    CHECK(buffers.next_tokens.download() == std::vector<std::int32_t>{3, 4, eos_id, 6, 0});
    CHECK(buffers.finished.download() == std::vector<std::int32_t>{1, 1, 1, 1, 1});
    CHECK(buffers.all_finished.download() == std::vector<std::int32_t>{1});

    // [B, max_steps]: columns 0 and 1 written, columns 2 and 3 still poisoned (-1).
    CHECK(buffers.output_tokens.download() == std::vector<std::int32_t>{5,      3,      -1, -1,  //
                                                                        eos_id, 4,      -1, -1,  //
                                                                        7,      eos_id, -1, -1,  //
                                                                        eos_id, 6,      -1, -1,  //
                                                                        eos_id, 0,      -1, -1});
  }

  SECTION("more rows than the flag kernel has threads") {
    const int B = 1100;
    StepBuffers buffers(B, V, max_steps, eos_id);
    std::vector<std::int32_t> winners(B, eos_id);
    const int straggler = test::random_ints(rng, 1, 0, B - 1)[0];
    CAPTURE(straggler);
    winners[straggler] = eos_id + 1;

    const test::DeviceArray<float> step_0(logits_with_winners(rng, V, winners));
    buffers.all_finished.poison();
    buffers.run_step(step_0.get(), 0, stream);
    CHECK(buffers.all_finished.download() == std::vector<std::int32_t>{0});

    winners[straggler] = eos_id;
    const test::DeviceArray<float> step_1(logits_with_winners(rng, V, winners));
    buffers.all_finished.poison();
    buffers.run_step(step_1.get(), 1, stream);
    CHECK(buffers.all_finished.download() == std::vector<std::int32_t>{1});
    CHECK(buffers.finished.download() == std::vector<std::int32_t>(B, 1));
  }
}

TEST_CASE("launch_argmax_step feeds forced tokens and keeps the EOS bookkeeping", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int B = 3, V = 101, max_steps = 5, eos_id = 9;
  StepBuffers buffers(B, V, max_steps, eos_id);
  buffers.output_tokens.poison();
  // Row 1 is forced to EOS at step 2; the argmax winners are never the forced tokens.
  const std::vector<std::int32_t> forced = {1, 2,  3,      4,  5,   //
                                            6, 7,  eos_id, 8,  10,  //
                                            0, 11, 12,     13, 14};
  const test::DeviceArray<std::int32_t> forced_device(forced);
  for (int step = 0; step < 3; ++step) {
    const test::DeviceArray<float> logits(logits_with_winners(rng, V, {50, 60, 70}));
    buffers.run_step(logits.get(), step, stream, forced_device.get());
    CHECK(buffers.next_tokens.download() ==
          std::vector<std::int32_t>{forced[step], forced[5 + step], forced[10 + step]});
  }
  CHECK(buffers.finished.download() == std::vector<std::int32_t>{0, 1, 0});
  CHECK(buffers.all_finished.download() == std::vector<std::int32_t>{0});
  CHECK(buffers.output_tokens.download() == std::vector<std::int32_t>{1, 2, 3, -1, -1,       //
                                                                      6, 7, eos_id, -1, -1,  //
                                                                      0, 11, 12, -1, -1});
}

TEST_CASE("launch_argmax_step with a device cursor reads the step and advances it", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int B = 2, V = 33, max_steps = 3, eos_id = 32;
  StepBuffers buffers(B, V, max_steps, eos_id);
  buffers.output_tokens.poison();
  test::DeviceArray<DecodePosition> cursor(std::vector<DecodePosition>{{0, 7}});
  const std::vector<std::vector<std::int32_t>> winners = {{4, 5}, {6, 7}, {8, 9}, {10, 11}};
  for (const auto& step_winners : winners) {  // one step more than there are columns
    const test::DeviceArray<float> logits(logits_with_winners(rng, V, step_winners));
    launch_argmax_step(logits.get(), buffers.next_tokens.get(), buffers.state(), cursor.get(), B, V,
                       stream.get());
  }
  stream.synchronize();
  const DecodePosition final_cursor = cursor.download()[0];
  CHECK(final_cursor.step == max_steps);  // the fourth step wrote nothing, moved nothing
  CHECK(final_cursor.position == 7 + max_steps);
  CHECK(buffers.output_tokens.download() == std::vector<std::int32_t>{4, 6, 8, 5, 7, 9});
}

TEST_CASE("launch_argmax_step rejects bad arguments", "[kernels]") {
  test::DeviceArray<float> logits(std::size_t{4} * 97);
  test::DeviceArray<std::int32_t> ints(std::size_t{4} * 8);
  const float* l = logits.get();
  std::int32_t* i = ints.get();
  // A state with every pointer set; each check below breaks one thing.
  const GreedyState good{nullptr, i, i, i, /*max_steps=*/8, /*eos_id=*/1};
  const auto with = [&good](auto change) {
    GreedyState state = good;
    change(state);
    return state;
  };
  // (logits, next_tokens, state, B, V, step, stream)
  CHECK_THROWS_AS(launch_argmax_step(l, i, good, 0, 97, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_step(l, i, good, 4, 0, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(
      launch_argmax_step(l, i, with([](GreedyState& s) { s.max_steps = 0; }), 4, 97, 0, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_step(l, i, good, 4, 97, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_step(l, i, good, 4, 97, -1, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_step(nullptr, i, good, 4, 97, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_step(l, nullptr, good, 4, 97, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_step(l, i, with([](GreedyState& s) { s.finished = nullptr; }), 4,
                                     97, 0, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_step(l, i, with([](GreedyState& s) { s.all_finished = nullptr; }),
                                     4, 97, 0, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_step(l, i, with([](GreedyState& s) { s.output_tokens = nullptr; }),
                                     4, 97, 0, nullptr),
                  std::invalid_argument);
}

}  // namespace
}  // namespace ladder
