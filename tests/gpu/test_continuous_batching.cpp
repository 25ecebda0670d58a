// tests/gpu/test_continuous_batching.cpp - what continuous batching adds on the GPU: the
// fp32 decode attention with a position per row (launch_fused_decode_attention_per_row;
// the bf16 one chapter 12 runs, launch_decode_attention_bf16_per_row, is tested in
// test_cache_attention_bf16_per_row.cpp), the argmax that leaves each row's token in its
// slot (launch_argmax_into_slots), and chapter 12 as a whole: every request's tokens
// equal the CPU reference's bf16 mode (chapter 12 serves with chapter 10's bf16 step) for
// that request alone, whatever its slot, arrival order and neighbours, under static and
// continuous batching; where they part, the reference's own top-2 margin at that token
// must be below the bf16 tolerance (each such token printed, as the bf16 chapters' tests
// do).
// Run: gpu_tests "[batching]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/precision_comparison.hpp"
#include "common/reference.hpp"
#include "common/request_trace.hpp"
#include "common/weights.hpp"
#include "kernels/cache_attention.cuh"
#include "kernels/sampling.cuh"
#include "tests/gpu/attention_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"
#include "tests/support/chapter_process.hpp"
#include "tests/support/golden_data.hpp"

namespace ladder {
namespace {

constexpr double kTolerance = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------- per-row attention

/// Row b's k, v of qkv [B, 3C] written at position s of row b only.
void store_row(test::HostKVCache& cache, const std::vector<float>& qkv, int b, int s) {
  const int C = cache.shape.C;
  const int D = cache.shape.D();
  for (int h = 0; h < cache.shape.H; ++h) {
    const auto k = qkv.begin() + (static_cast<std::ptrdiff_t>(b) * 3 + 1) * C + h * D;
    const auto at = static_cast<std::ptrdiff_t>(cache.shape.index(b, h, s));
    std::copy_n(k, D, cache.keys.begin() + at);
    std::copy_n(k + C, D, cache.values.begin() + at);
  }
}

/// reference::decode_attention of row b alone over its positions 0 .. positions[b]; 0 for
/// an idle row (position outside the cache).
std::vector<float> expected_per_row(const std::vector<float>& qkv, const test::HostKVCache& cache,
                                    const std::vector<std::int32_t>& positions) {
  const auto [B, H, C, capacity] = cache.shape;
  const std::vector<float> q = test::queries_of(qkv, B, C);
  std::vector<float> out(static_cast<std::size_t>(B) * C, 0.0f);
  const std::size_t row_floats = static_cast<std::size_t>(capacity) * C;
  for (int b = 0; b < B; ++b) {
    if (positions[b] < 0 || positions[b] >= capacity) continue;
    reference::decode_attention(
        q.data() + static_cast<std::size_t>(b) * C, cache.keys.data() + b * row_floats,
        cache.values.data() + b * row_floats, out.data() + static_cast<std::size_t>(b) * C, 1,
        positions[b] + 1, capacity, H, C);
  }
  return out;
}

TEST_CASE("launch_fused_decode_attention_per_row: each row appends and attends at its own position",
          "[kernels][batching]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  // D = 64 (GPT-2's), 25 (the scalar path), 128 (the largest head); 1, 5 and 33 rows;
  // capacities under one block of positions, not a multiple of 128, and GPT-2's.
  const test::HeadShape head_shapes[] = {{768, 12}, {100, 4}, {256, 2}};
  for (const auto [C, H] : head_shapes) {
    for (const int B : {1, 5, 33}) {
      for (const int capacity : {7, 300, 1024}) {
        CAPTURE(B, C, H, capacity);
        const test::HostKVCache cache = test::random_kv_cache(rng, {B, H, C, capacity});
        const std::vector<float> qkv = test::random_qkv(rng, B, C);
        // Every length from 1 to the capacity can sit beside any other; some rows idle
        // (-1, and one past the end), the first row at the last position.
        std::vector<std::int32_t> positions =
            test::random_ints(rng, static_cast<std::size_t>(B), -1, capacity - 1);
        positions[0] = capacity - 1;
        if (B > 2) positions[2] = capacity;
        if (B > 3) positions[3] = -1;
        // Before the step each row's positions from its own p onwards are NaN: reading
        // its cache at p (instead of this step's k, v) or past p poisons its output.
        test::HostKVCache before = cache;
        for (int b = 0; b < B; ++b)
          for (int s = std::max(positions[b], 0); s < capacity; ++s)
            for (int h = 0; h < H; ++h) {
              const auto at = static_cast<std::ptrdiff_t>(before.shape.index(b, h, s));
              std::fill_n(before.keys.begin() + at, C / H, kNaN);
              std::fill_n(before.values.begin() + at, C / H, kNaN);
            }
        test::HostKVCache after = before;
        for (int b = 0; b < B; ++b)
          if (positions[b] >= 0 && positions[b] < capacity) store_row(after, qkv, b, positions[b]);

        const test::DeviceArray<float> qkv_device(qkv);
        const test::DeviceArray<std::int32_t> positions_device(positions);
        const test::DeviceKVCache cache_device(before);
        test::DeviceArray<unsigned char> workspace(std::vector<unsigned char>(
            fused_decode_attention_workspace_bytes(B, H, C, capacity), 0));
        test::DeviceArray<float> out = test::poisoned_floats(static_cast<std::size_t>(B) * C);
        launch_fused_decode_attention_per_row(
            qkv_device.get(), cache_device.keys(), cache_device.values(), positions_device.get(),
            capacity, out.get(), workspace.get(), B, H, C, stream.get());
        stream.synchronize();
        const std::vector<float> result = out.download();
        CHECK(test::checked_relative_error(result, expected_per_row(qkv, after, positions)) <=
              kTolerance);
        // Each active row's k, v at its own position, nothing else (idle rows untouched).
        test::check_same_bits(cache_device, after);

        // Again on the cache it wrote: bit for bit the same (workspace left ready).
        out.poison();
        launch_fused_decode_attention_per_row(
            qkv_device.get(), cache_device.keys(), cache_device.values(), positions_device.get(),
            capacity, out.get(), workspace.get(), B, H, C, stream.get());
        stream.synchronize();
        CHECK(test::count_bit_mismatches(out.download(), result) == 0);
      }
    }
  }
}

TEST_CASE(
    "launch_fused_decode_attention_per_row with every row at one position is the cursor "
    "kernel",
    "[kernels][batching]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int B = 3;
  const int H = 12;
  const int C = 768;
  const int capacity = 260;
  const int position = 200;
  const test::HostKVCache cache = test::random_kv_cache(rng, {B, H, C, capacity});
  const std::vector<float> qkv = test::random_qkv(rng, B, C);
  const test::DeviceArray<float> qkv_device(qkv);
  test::DeviceArray<unsigned char> workspace(
      std::vector<unsigned char>(fused_decode_attention_workspace_bytes(B, H, C, capacity), 0));

  const test::DeviceKVCache per_row_cache(cache);
  const test::DeviceArray<std::int32_t> positions(std::vector<std::int32_t>(B, position));
  const std::vector<float> per_row =
      test::launch_into_poisoned(static_cast<std::size_t>(B) * C, stream, [&](float* out) {
        launch_fused_decode_attention_per_row(qkv_device.get(), per_row_cache.keys(),
                                              per_row_cache.values(), positions.get(), capacity,
                                              out, workspace.get(), B, H, C, stream.get());
      });
  const test::DeviceKVCache cursor_cache(cache);
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
  const std::vector<float> shared =
      test::launch_into_poisoned(static_cast<std::size_t>(B) * C, stream, [&](float* out) {
        launch_fused_decode_attention(qkv_device.get(), cursor_cache.keys(), cursor_cache.values(),
                                      cursor.get(), capacity, out, workspace.get(), B, H, C,
                                      stream.get());
      });
  CHECK(test::count_bit_mismatches(per_row, shared) == 0);
  test::check_same_bits(per_row_cache, cursor_cache.download());
}

TEST_CASE("launch_fused_decode_attention_per_row rejects bad arguments", "[kernels][batching]") {
  const test::DeviceArray<float> buffer(std::vector<float>(4096, 0.0f));
  const test::DeviceArray<std::int32_t> positions(std::vector<std::int32_t>(2, 0));
  test::DeviceArray<unsigned char> workspace(
      std::vector<unsigned char>(fused_decode_attention_workspace_bytes(2, 2, 64, 4), 0));
  float* in = buffer.get();
  const auto launch = test::on_default_stream(launch_fused_decode_attention_per_row);
  test::check_rejects_each_null_pointer(launch, static_cast<const float*>(in), in, in,
                                        static_cast<const std::int32_t*>(positions.get()), 4, in,
                                        static_cast<void*>(workspace.get()), 2, 2, 64);
  CHECK_THROWS_AS(launch(in, in, in, positions.get(), 0, in, workspace.get(), 2, 2, 64),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch(in, in, in, positions.get(), 4, in, workspace.get(), 2, 3, 64),
                  std::invalid_argument);
}

// ---------------------------------------------------------------- argmax into slots

TEST_CASE("launch_argmax_into_slots leaves each row's argmax in its slot, idle rows nothing",
          "[kernels][batching]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  for (const int count : {1, 97, 786}) {
    for (const int rows : {1, 7, 40}) {
      CAPTURE(count, rows);
      // Values on a coarse grid, so ties are common: they go to the smallest index.
      std::vector<float> values(static_cast<std::size_t>(rows) * count);
      for (float& value : values)
        value = static_cast<float>(test::random_ints(rng, 1, -4, 4)[0]) * 0.5f;
      std::vector<std::int32_t> indices(values.size());
      for (std::size_t i = 0; i < indices.size(); ++i)
        indices[i] = static_cast<std::int32_t>(i % count);
      // Rows serve slots in a scrambled order; every third row sits out.
      const int slots = rows + 3;
      std::vector<std::int32_t> row_slots(rows);
      for (int r = 0; r < rows; ++r) row_slots[r] = r % 3 == 2 ? -1 : (r * 5 + 2) % slots;
      std::map<int, int> seen;
      for (int r = 0; r < rows; ++r)
        if (row_slots[r] >= 0 && !seen.emplace(row_slots[r], r).second) row_slots[r] = -1;

      const test::DeviceArray<float> values_device(values);
      const test::DeviceArray<std::int32_t> indices_device(indices);
      const test::DeviceArray<std::int32_t> row_slots_device(row_slots);
      test::DeviceArray<std::int32_t> tokens(std::vector<std::int32_t>(slots, -7));
      launch_argmax_into_slots({values_device.get(), indices_device.get(), count},
                               row_slots_device.get(), tokens.get(), rows, stream.get());
      stream.synchronize();
      std::vector<std::int32_t> expected(slots, -7);
      for (int r = 0; r < rows; ++r)
        if (row_slots[r] >= 0)
          expected[row_slots[r]] =
              reference::argmax(values.data() + static_cast<std::size_t>(r) * count, count);
      CHECK(tokens.download() == expected);
    }
  }
}

TEST_CASE("launch_argmax_into_slots rejects bad arguments", "[kernels][batching]") {
  const test::DeviceArray<float> values(std::vector<float>(8, 0.0f));
  const test::DeviceArray<std::int32_t> ints(std::vector<std::int32_t>(8, 0));
  const ArgmaxCandidates candidates{values.get(), ints.get(), 4};
  CHECK_THROWS_AS(launch_argmax_into_slots(candidates, nullptr, ints.get(), 2, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_into_slots(candidates, ints.get(), nullptr, 2, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      launch_argmax_into_slots({nullptr, ints.get(), 4}, ints.get(), ints.get(), 2, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(launch_argmax_into_slots(candidates, ints.get(), ints.get(), 0, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      launch_argmax_into_slots({values.get(), ints.get(), 0}, ints.get(), ints.get(), 2, nullptr),
      std::invalid_argument);
}

// ---------------------------------------------------------------- chapter 12

const std::string kChapter = "12_continuous_batching";
// Emitted by about half of the golden model's greedy rows from random prompts: requests
// stop at EOS as well as at their limits (as in the scheduler's CPU tests).
constexpr int kEmittedEos = 192;

const Gpt2Weights& golden_weights() {
  static const Gpt2Weights weights = testing::load_golden_model();
  return weights;
}

/// Each configuration's (slot, tokens) per request, read back from --dump-requests.
struct ServedRequests {
  std::map<int, std::vector<int>> slots;                         ///< configuration -> slot
  std::map<int, std::vector<std::vector<std::int32_t>>> tokens;  ///< configuration -> tokens
};

ServedRequests read_dump(const std::string& path) {
  ServedRequests served;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int configuration = 0;
    std::size_t request = 0;
    int slot = 0;
    fields >> configuration >> request >> slot;
    std::vector<std::int32_t> tokens;
    for (std::int32_t token = 0; fields >> token;) tokens.push_back(token);
    REQUIRE(request == served.tokens[configuration].size());
    served.slots[configuration].push_back(slot);
    served.tokens[configuration].push_back(tokens);
  }
  return served;
}

/// The largest logit error a bf16 run may have against the bf16 reference, relative to
/// the largest logit (tests/gpu/test_chapters.cpp's: 1e-2 on the small golden model,
/// 2e-2 on GPT-2 small's twelve layers); a token may differ from the reference's only
/// where the reference's relative top-2 margin is below twice that
/// (common/precision_comparison.hpp).
constexpr double kGoldenLogitsTolerance = 1e-2;
constexpr double kGpt2SmallLogitsTolerance = 2e-2;

/// The model a serving test runs: its weights (for the reference), the chapter's flags
/// that load the same, the id that stops a request, and the bf16 logits tolerance.
struct ServedModel {
  const Gpt2Weights& weights;
  std::vector<std::string> flags;
  int eos;
  double logits_tolerance;
};

ServedModel golden_served_model() {
  return {golden_weights(),
          {"--weights", testing::test_data_path("golden_model")},
          kEmittedEos,
          kGoldenLogitsTolerance};
}

/// Checks one request's served tokens against the bf16 reference's generation for it
/// alone (with logits, [steps, 1, V]): equal, or parting at a token where the
/// reference's own top-2 margin is below twice the tolerance (printed, never hidden);
/// from there on the request's inputs differ, so the rest says nothing.
void check_request_tokens(const std::vector<std::int32_t>& served,
                          const reference::Generation& expected, int vocab_size,
                          double logits_tolerance) {
  if (served == expected.tokens) return;
  const auto parted =
      std::mismatch(served.begin(), served.end(), expected.tokens.begin(), expected.tokens.end());
  const std::size_t at = static_cast<std::size_t>(parted.first - served.begin());
  INFO("served " << served.size() << " tokens, the reference " << expected.tokens.size()
                 << "; first difference at new token " << at);
  // One a prefix of the other: a stop rule broken, not a rounding.
  REQUIRE(at < served.size());
  REQUIRE(at < expected.tokens.size());
  const double margin = relative_top2_margin(
      expected.logits.data() + at * static_cast<std::size_t>(vocab_size), vocab_size);
  std::printf(
      "  a request parts from the bf16 reference at new token %zu: reference top-2 "
      "margin %.3g\n",
      at, margin);
  CHECK(margin < 2 * logits_tolerance);
}

/// Serves `trace` with the chapter on `model` and checks every request of every
/// configuration (static batches, continuous with one and two steps in flight) against
/// reference::generate in bf16 mode for that request alone.
void check_chapter_serves(const std::vector<Request>& trace, int slots,
                          const ServedModel& model = golden_served_model()) {
  const std::string folder = testing::make_temporary_directory("ladder_batching");
  const std::string trace_path = folder + "/trace.txt";
  const std::string dump_path = folder + "/requests.txt";
  const std::string json_path = folder + "/serving.json";
  write_trace(trace_path, trace);
  std::vector<std::string> arguments = model.flags;
  arguments.insert(arguments.end(),
                   {"--trace", trace_path, "--slots", std::to_string(slots), "--eos",
                    std::to_string(model.eos), "--dump-requests", dump_path, "--json", json_path});
  const testing::ProcessResult run = testing::run_chapter_process(kChapter, arguments);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const ServedRequests served = read_dump(dump_path);
  REQUIRE(served.tokens.size() == 3);
  const reference::Model oracle(model.weights, reference::Precision::bf16);
  std::vector<reference::Generation> expected;
  for (const Request& request : trace)
    expected.push_back(
        reference::generate(oracle, {request.prompt}, request.max_new_tokens, model.eos, true));
  for (const auto& [configuration, tokens] : served.tokens) {
    CAPTURE(configuration);
    REQUIRE(tokens.size() == trace.size());
    for (std::size_t i = 0; i < trace.size(); ++i) {
      CAPTURE(i);
      check_request_tokens(tokens[i], expected[i], model.weights.config.vocab_size,
                           model.logits_tolerance);
      const int slot = served.slots.at(configuration)[i];
      CHECK(slot >= 0);
      CHECK(slot < slots);
    }
  }
  // The JSON the page's tables and plot are made from: all three configurations.
  std::ifstream json(json_path);
  const std::string text((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
  std::size_t configurations = 0;
  for (std::size_t at = text.find("\"output_tokens_per_second\""); at != std::string::npos;
       at = text.find("\"output_tokens_per_second\"", at + 1))
    ++configurations;
  CHECK(configurations == 3);
  CHECK(text.find("\"busy_slots\": [") != std::string::npos);
}

/// Random prompts of 1 .. 24 tokens, limits of 1 .. max_new over the golden vocabulary.
std::vector<Request> golden_trace(int requests, std::uint64_t seed, int max_new,
                                  double arrivals_per_second = 0) {
  TraceOptions options;
  options.requests = requests;
  options.min_prompt_length = 1;
  options.max_prompt_length = 24;
  options.min_new_tokens = 1;
  options.max_new_tokens = max_new;
  options.arrivals_per_second = arrivals_per_second;
  options.seed = seed;
  options.vocab_size = golden_weights().config.vocab_size;
  options.excluded_id = golden_weights().config.eos_token_id;
  return generate_trace(options);
}

TEST_CASE("chapter 12: every request's tokens equal the reference's for that request alone",
          "[batching][chapters]") {
  SECTION("all at time 0, 8 slots") { check_chapter_serves(golden_trace(40, 1, 60), 8); }
  SECTION("Poisson arrivals, 5 slots") { check_chapter_serves(golden_trace(30, 2, 40, 2000), 5); }
  SECTION("one slot") { check_chapter_serves(golden_trace(6, 3, 20), 1); }
  SECTION("more slots than requests") { check_chapter_serves(golden_trace(5, 4, 30), 7); }
  // More than 8 slots: the decode step's rows past one warp's worth of 8, and its
  // products at B = 24 and 40 (row tiles of 32 and 64).
  SECTION("all at time 0, 24 slots") { check_chapter_serves(golden_trace(60, 6, 40), 24); }
  SECTION("all at time 0, 40 slots") { check_chapter_serves(golden_trace(50, 7, 30), 40); }
}

TEST_CASE("chapter 12 at GPT-2 small shapes with 12 slots: every request equals the reference's",
          "[batching][chapters]") {
  // GPT-2 small with the chapters' random weights (seed 0): the attention's 12 heads of 64,
  // the products at C = 768 and V = 50257, on more slots than the golden tests' 8. Short
  // prompts and limits keep the CPU reference's work to a few hundred token positions.
  const Gpt2Config config;
  static const Gpt2Weights weights = random_gpt2_weights(config, 0);
  TraceOptions options;
  options.requests = 20;
  options.min_prompt_length = 1;
  options.max_prompt_length = 8;
  options.min_new_tokens = 1;
  options.max_new_tokens = 6;
  options.seed = 9;
  options.vocab_size = config.vocab_size;
  options.excluded_id = config.eos_token_id;
  check_chapter_serves(
      generate_trace(options), 12,
      ServedModel{weights, {"--seed", "0"}, config.eos_token_id, kGpt2SmallLogitsTolerance});
}

TEST_CASE("chapter 12: slots are reused by many short requests among long ones",
          "[batching][chapters]") {
  // Every fourth request long (a prompt of 24 and a limit of 100), the rest one-token
  // prompts with limits of 1 or 2: on 3 slots each slot serves many requests, some
  // prefilled and retired in one step, beside rows deep into their cache.
  std::vector<Request> trace = golden_trace(48, 5, 2);
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (i % 4 == 0) {
      trace[i].prompt.resize(24, 7);
      trace[i].max_new_tokens = 100;
    } else {
      trace[i].prompt.resize(1);
    }
  }
  check_chapter_serves(trace, 3);
}

}  // namespace
}  // namespace ladder
