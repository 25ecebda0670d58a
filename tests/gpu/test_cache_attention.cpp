// tests/gpu/test_cache_attention.cpp - kernels/cache_attention (KV append, static-cache
// attention and fused append + flash-decoding attention, position read from the device)
// against reference::decode_attention and reference::causal_attention.
#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "tests/gpu/attention_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr double kTolerance = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using test::HeadShape;
// D = 64 (one head; GPT-2's twelve), 25 (not a multiple of 4: scalar path), 128 (the
// largest head size).
const HeadShape kHeadShapes[] = {{64, 1}, {768, 12}, {100, 4}, {256, 2}};

/// A zero-filled workspace for launch_fused_decode_attention, as the launcher requires.
test::DeviceArray<unsigned char> zeroed_workspace(int B, int H, int C, int capacity) {
  return test::DeviceArray<unsigned char>(
      std::vector<unsigned char>(fused_decode_attention_workspace_bytes(B, H, C, capacity), 0));
}

/// launch_static_cache_attention's output [B, C], written into a poisoned buffer, for the
/// queries `q` (rows q_row_stride floats apart) over `cache` up to the cursor's position.
std::vector<float> static_cache_attention_output(const std::vector<float>& q, int q_row_stride,
                                                 const test::DeviceKVCache& cache,
                                                 const test::DeviceArray<DecodePosition>& cursor,
                                                 const test::DeviceStream& stream) {
  const auto [B, H, C, capacity] = cache.shape();
  const test::DeviceArray<float> q_device(q);
  test::DeviceArray<float> out = test::poisoned_floats(static_cast<std::size_t>(B) * C);
  launch_static_cache_attention(q_device.get(), q_row_stride, cache.keys(), cache.values(),
                                cursor.get(), capacity, out.get(), B, H, C, stream.get());
  stream.synchronize();
  return out.download();
}

// ---------------------------------------------------------------- append

TEST_CASE("launch_append_kv_at_cursor writes exactly the cursor's position", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int capacity = 9;

  for (const auto [C, H] : kHeadShapes) {
    for (const int B : {1, 3, 32}) {
      for (const int position : {0, 4, capacity - 1}) {
        CAPTURE(B, position, capacity, H, C);
        const std::vector<float> qkv = test::random_qkv(rng, B, C);
        const test::HostKVCache before = test::random_kv_cache(rng, {B, H, C, capacity});
        const test::DeviceArray<float> qkv_device(qkv);
        const test::DeviceKVCache cache(before);
        const test::DeviceArray<DecodePosition> cursor = test::device_cursor(/*step=*/1, position);

        launch_append_kv_at_cursor(qkv_device.get(), cache.keys(), cache.values(), cursor.get(),
                                   capacity, B, H, C, stream.get());
        stream.synchronize();

        test::HostKVCache expected = before;
        expected.store(qkv, position);
        test::check_same_bits(cache, expected);
      }
    }
  }
}

TEST_CASE("launch_append_kv_at_cursor writes nothing for a cursor outside the cache", "[kernels]") {
  test::DeviceStream stream;
  const test::KVCacheShape shape{/*B=*/2, /*H=*/2, /*C=*/64, /*capacity=*/5};
  const auto [B, H, C, capacity] = shape;
  const test::DeviceArray<float> qkv(std::vector<float>(static_cast<std::size_t>(B) * 3 * C, 1.0f));
  for (const int position : {-1, capacity, capacity + 100}) {
    CAPTURE(position);
    const test::DeviceKVCache cache = test::DeviceKVCache::poisoned(shape);
    const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
    launch_append_kv_at_cursor(qkv.get(), cache.keys(), cache.values(), cursor.get(), capacity, B,
                               H, C, stream.get());
    stream.synchronize();
    test::check_same_bits(cache, test::poison_pattern(shape));
  }
}

// ---------------------------------------------------------------- static cache

TEST_CASE("launch_static_cache_attention equals decode attention over positions 0 .. p",
          "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int capacity = 257;

  for (const auto [C, H] : kHeadShapes) {
    for (const int B : {1, 3, 32}) {
      const int D = C / H;
      const test::HostKVCache cache = test::random_kv_cache(rng, {B, H, C, capacity});
      for (const int position : {0, 1, 31, 32, 200, capacity - 1}) {
        CAPTURE(B, position, capacity, H, C);
        const std::vector<float> qkv = test::random_qkv(rng, B, C);
        const test::DeviceArray<DecodePosition> cursor = test::device_cursor(/*step=*/2, position);
        const std::vector<float> expected =
            test::expected_decode_attention(qkv, cache, /*L=*/position + 1);

        // Unused positions hold large finite garbage: the kernel reads them (the mask
        // comes after the scores), so they must not change the result.
        test::HostKVCache with_garbage = cache;
        const std::size_t n = cache.keys.size();
        const std::vector<float> garbage = test::random_uniform(rng, 2 * n, -1e30f, 1e30f);
        for (std::size_t i = 0; i < n; ++i) {
          if (static_cast<int>((i / D) % capacity) > position) {
            with_garbage.keys[i] = garbage[i];
            with_garbage.values[i] = garbage[n + i];
          }
        }
        const test::DeviceKVCache garbage_device(with_garbage);

        // q read in place from the qkv buffer (row stride 3C), then from its own [B, C] buffer.
        const std::vector<float> in_place =
            static_cache_attention_output(qkv, 3 * C, garbage_device, cursor, stream);
        CHECK(test::checked_relative_error(in_place, expected) <= kTolerance);
        CHECK(test::checked_relative_error(
                  static_cache_attention_output(test::queries_of(qkv, B, C), C, garbage_device,
                                                cursor, stream),
                  expected) <= kTolerance);

        // Zeros instead of garbage, the same answer to the bit: masked positions weigh
        // exactly 0.
        test::HostKVCache zeroed = cache;
        zeroed.fill_from(position + 1, 0.0f);
        const test::DeviceKVCache zeroed_device(zeroed);
        CHECK(test::count_bit_mismatches(
                  static_cache_attention_output(qkv, 3 * C, zeroed_device, cursor, stream),
                  in_place) == 0);
      }
    }
  }
}

// The lesson of chapter 04 made visible: the static cache reads every position, so a
// NaN after the cursor's position poisons the output, where decode attention over the
// valid length (the fused kernel) never sees it.
TEST_CASE("launch_static_cache_attention reads the whole cache, masked positions included",
          "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const test::KVCacheShape shape{/*B=*/1, /*H=*/12, /*C=*/768, /*capacity=*/300};
  const auto [B, H, C, capacity] = shape;
  const int position = 10;
  test::HostKVCache cache = test::random_kv_cache(rng, shape);
  const test::DeviceArray<float> qkv(test::random_qkv(rng, B, C));
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);

  SECTION("a NaN key at the last position") {
    test::fill_position(cache.keys, shape, capacity - 1, kNaN);
  }
  SECTION("a NaN value at the last position") {
    test::fill_position(cache.values, shape, capacity - 1, kNaN);
  }
  const test::DeviceKVCache cache_device(cache);
  // Zeros, not poison: every NaN in the result must come from the kernel.
  test::DeviceArray<float> out(std::vector<float>(static_cast<std::size_t>(B) * C, 0.0f));
  launch_static_cache_attention(qkv.get(), 3 * C, cache_device.keys(), cache_device.values(),
                                cursor.get(), capacity, out.get(), B, H, C, stream.get());
  stream.synchronize();
  CHECK(test::all_nan(out.download()));
}

TEST_CASE("launch_static_cache_attention answers NaN for a cursor outside the cache", "[kernels]") {
  test::DeviceStream stream;
  const test::KVCacheShape shape{/*B=*/3, /*H=*/2, /*C=*/64, /*capacity=*/5};
  const auto [B, H, C, capacity] = shape;
  const test::DeviceArray<float> qkv(std::vector<float>(static_cast<std::size_t>(B) * 3 * C, 0.5f));
  const test::DeviceKVCache cache(test::constant_kv_cache(shape, 0.25f, 0.75f));
  for (const int position : {-1, capacity}) {
    CAPTURE(position);
    const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
    test::DeviceArray<float> out(std::vector<float>(static_cast<std::size_t>(B) * C, 0.0f));
    launch_static_cache_attention(qkv.get(), 3 * C, cache.keys(), cache.values(), cursor.get(),
                                  capacity, out.get(), B, H, C, stream.get());
    stream.synchronize();
    CHECK(test::all_nan(out.download()));
  }
}

// ---------------------------------------------------------------- fused

TEST_CASE("launch_fused_decode_attention appends k, v and attends over positions 0 .. p only",
          "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  // GPT-2's n_positions (8 blocks of 128 positions per head), and a cache longer than
  // the 32 blocks a head may have, whose blocks then take shares of 256 positions.
  struct CacheShape {
    int capacity;
    int B;
  };
  constexpr CacheShape kCacheShapes[] = {{1024, 1}, {1024, 3}, {1024, 32}, {4500, 1}};

  for (const auto [C, H] : kHeadShapes) {
    for (const auto [capacity, B] : kCacheShapes) {
      const test::HostKVCache cache = test::random_kv_cache(rng, {B, H, C, capacity});
      // Zeroed once; every launch must leave it ready for the next one.
      test::DeviceArray<unsigned char> workspace = zeroed_workspace(B, H, C, capacity);

      for (const int length : {1, 2, 63, 64, 65, 127, 128, 129, 257, 1000, 4300}) {
        if (length > capacity) continue;
        const int position = length - 1;
        CAPTURE(B, length, capacity, H, C);
        const std::vector<float> qkv = test::random_qkv(rng, B, C);
        // Before the step: positions < p valid, p and everything after it NaN. Reading
        // the cache at p (instead of this step's k, v) or after p poisons the output.
        test::HostKVCache before = cache;
        before.fill_from(position, kNaN);
        test::HostKVCache after = before;
        after.store(qkv, position);

        const test::DeviceArray<float> qkv_device(qkv);
        const test::DeviceKVCache cache_device(before);
        const test::DeviceArray<DecodePosition> cursor = test::device_cursor(/*step=*/0, position);
        test::DeviceArray<float> out = test::poisoned_floats(static_cast<std::size_t>(B) * C);

        launch_fused_decode_attention(qkv_device.get(), cache_device.keys(), cache_device.values(),
                                      cursor.get(), capacity, out.get(), workspace.get(), B, H, C,
                                      stream.get());
        stream.synchronize();
        const std::vector<float> result = out.download();

        const std::vector<float> expected = test::expected_decode_attention(qkv, after, length);
        CHECK(test::checked_relative_error(result, expected) <= kTolerance);
        // The cache now holds this step's k, v at p, and nothing else changed.
        test::check_same_bits(cache_device, after);

        // Run again on the cache it has just written: the same answer to the bit (the
        // splits are merged in a fixed order, and the workspace was left ready).
        out.poison();
        launch_fused_decode_attention(qkv_device.get(), cache_device.keys(), cache_device.values(),
                                      cursor.get(), capacity, out.get(), workspace.get(), B, H, C,
                                      stream.get());
        stream.synchronize();
        CHECK(test::count_bit_mismatches(out.download(), result) == 0);
      }
    }
  }
}

TEST_CASE("launch_fused_decode_attention takes the scalar path for an unaligned qkv", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const test::KVCacheShape shape{/*B=*/3, /*H=*/12, /*C=*/768, /*capacity=*/128};
  const auto [B, H, C, capacity] = shape;
  const int length = 100;
  const int position = length - 1;
  const test::HostKVCache before = test::random_kv_cache(rng, shape);
  const std::vector<float> qkv = test::random_qkv(rng, B, C);
  // One float past a 16-byte boundary.
  const test::DeviceArray<float> qkv_device(test::with_leading_zeros(qkv, 1));
  const test::DeviceKVCache cache(before);
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
  test::DeviceArray<unsigned char> workspace = zeroed_workspace(B, H, C, capacity);
  test::DeviceArray<float> out = test::poisoned_floats(static_cast<std::size_t>(B) * C);

  launch_fused_decode_attention(qkv_device.get() + 1, cache.keys(), cache.values(), cursor.get(),
                                capacity, out.get(), workspace.get(), B, H, C, stream.get());
  stream.synchronize();

  test::HostKVCache after = before;
  after.store(qkv, position);
  const std::vector<float> expected = test::expected_decode_attention(qkv, after, length);
  CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
  test::check_same_bits(cache, after);
}

// A whole sequence fed one token per step, as a decode loop does: step t appends its
// k, v at position t and attends over 0 .. t. Every step must match causal attention
// over the whole sequence at once, so each append is visible to every later step.
TEST_CASE("launch_fused_decode_attention step by step reproduces causal attention", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int B = 3;
  const int T = 70;
  const int capacity = 80;

  for (const auto [C, H] : kHeadShapes) {
    CAPTURE(H, C);
    const std::vector<float> qkv = test::random_qkv(rng, static_cast<std::size_t>(B) * T, C);
    const std::vector<float> whole = test::expected_causal_attention(qkv, B, T, H, C);

    const test::DeviceKVCache cache = test::DeviceKVCache::poisoned({B, H, C, capacity});
    test::DeviceArray<unsigned char> workspace = zeroed_workspace(B, H, C, capacity);
    test::DeviceArray<DecodePosition> cursor(1);
    test::DecodeSteps steps(qkv, B, T, C);
    for (int t = 0; t < T; ++t) {
      CAPTURE(t);
      steps.begin(t);
      cursor.upload({DecodePosition{t, t}});
      launch_fused_decode_attention(steps.qkv(), cache.keys(), cache.values(), cursor.get(),
                                    capacity, steps.out(), workspace.get(), B, H, C, stream.get());
      stream.synchronize();
      REQUIRE(steps.relative_error(whole, t) <= kTolerance);
    }
  }
}

TEST_CASE("launch_fused_decode_attention: a cursor outside the cache gives NaN, no write",
          "[kernels]") {
  test::DeviceStream stream;
  const test::KVCacheShape shape{/*B=*/3, /*H=*/2, /*C=*/64, /*capacity=*/5};
  const auto [B, H, C, capacity] = shape;
  const test::DeviceArray<float> qkv(std::vector<float>(static_cast<std::size_t>(B) * 3 * C, 0.5f));
  test::DeviceArray<unsigned char> workspace = zeroed_workspace(B, H, C, capacity);
  const test::HostKVCache unchanged = test::constant_kv_cache(shape, 0.25f, 0.25f);
  for (const int position : {-1, capacity}) {
    CAPTURE(position);
    const test::DeviceKVCache cache(unchanged);
    const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
    test::DeviceArray<float> out(std::vector<float>(static_cast<std::size_t>(B) * C, 0.0f));
    launch_fused_decode_attention(qkv.get(), cache.keys(), cache.values(), cursor.get(), capacity,
                                  out.get(), workspace.get(), B, H, C, stream.get());
    stream.synchronize();
    CHECK(test::all_nan(out.download()));
    test::check_same_bits(cache, unchanged);
  }
}

TEST_CASE("fused_decode_attention_workspace_bytes is enough and grows with the shapes",
          "[kernels]") {
  const std::size_t gpt2 = fused_decode_attention_workspace_bytes(32, 12, 768, 1024);
  CHECK(gpt2 > 0);
  CHECK(gpt2 < (std::size_t{16} << 20));  // a few MiB, not a second KV cache
  CHECK(fused_decode_attention_workspace_bytes(1, 12, 768, 1024) < gpt2);
  CHECK(fused_decode_attention_workspace_bytes(32, 12, 768, 100) < gpt2);
  CHECK(fused_decode_attention_workspace_bytes(1, 1, 64, 1) > 0);
}

// ---------------------------------------------------------------- bad arguments

TEST_CASE("cache attention launchers reject bad arguments", "[kernels]") {
  test::DeviceArray<float> buffer(std::size_t{4} * 3 * 64);
  test::DeviceArray<DecodePosition> cursor_array(1);
  test::DeviceArray<unsigned char> workspace_array(std::size_t{1} << 16);
  const float* in = buffer.get();
  float* out = buffer.get();
  const DecodePosition* cursor = cursor_array.get();
  void* workspace = workspace_array.get();

  // append: (qkv, keys, values, cursor, capacity, B, H, C)
  const auto append = test::on_default_stream(launch_append_kv_at_cursor);
  CHECK_THROWS_AS(append(in, out, out, cursor, 0, 1, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(append(in, out, out, cursor, 4, 0, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(append(in, out, out, cursor, 4, 1, 0, 64), std::invalid_argument);
  CHECK_THROWS_AS(append(in, out, out, cursor, 4, 1, 2, 0), std::invalid_argument);
  CHECK_THROWS_AS(append(in, out, out, cursor, 4, 1, 3, 64), std::invalid_argument);  // C % H != 0
  test::check_rejects_each_null_pointer(append, in, out, out, cursor, 4, 1, 2, 64);

  // static: (q, q_row_stride, keys, values, cursor, capacity, out, B, H, C)
  const auto static_cache = test::on_default_stream(launch_static_cache_attention);
  CHECK_THROWS_AS(static_cache(in, 64, in, in, cursor, 4, out, 0, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(static_cache(in, 64, in, in, cursor, 0, out, 1, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(static_cache(in, 64, in, in, cursor, 4, out, 1, 0, 64), std::invalid_argument);
  // C % H != 0; D = 256 > kMaxHeadDim; q_row_stride < C
  CHECK_THROWS_AS(static_cache(in, 64, in, in, cursor, 4, out, 1, 3, 64), std::invalid_argument);
  CHECK_THROWS_AS(static_cache(in, 256, in, in, cursor, 4, out, 1, 1, 256), std::invalid_argument);
  CHECK_THROWS_AS(static_cache(in, 63, in, in, cursor, 4, out, 1, 2, 64), std::invalid_argument);
  test::check_rejects_each_null_pointer(static_cache, in, 64, in, in, cursor, 4, out, 1, 2, 64);

  // fused: (qkv, keys, values, cursor, capacity, out, workspace, B, H, C)
  const auto fused =
      test::on_default_stream(launch_fused_decode_attention, LaunchDependents::kAtStart,
                              DecodeLaunch::kAfterPrevious);
  CHECK_THROWS_AS(fused(in, out, out, cursor, 4, out, workspace, 0, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(fused(in, out, out, cursor, 0, out, workspace, 1, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(fused(in, out, out, cursor, 4, out, workspace, 1, 0, 64), std::invalid_argument);
  // C % H != 0; D = 256 > kMaxHeadDim; a misaligned workspace
  CHECK_THROWS_AS(fused(in, out, out, cursor, 4, out, workspace, 1, 3, 64), std::invalid_argument);
  CHECK_THROWS_AS(fused(in, out, out, cursor, 4, out, workspace, 1, 1, 256), std::invalid_argument);
  CHECK_THROWS_AS(fused(in, out, out, cursor, 4, out, workspace_array.get() + 4, 1, 2, 64),
                  std::invalid_argument);
  test::check_rejects_each_null_pointer(fused, in, out, out, cursor, 4, out, workspace, 1, 2, 64);

  // workspace size: (B, H, C, capacity)
  CHECK_THROWS_AS(fused_decode_attention_workspace_bytes(0, 2, 64, 4), std::invalid_argument);
  CHECK_THROWS_AS(fused_decode_attention_workspace_bytes(1, 0, 64, 4), std::invalid_argument);
  CHECK_THROWS_AS(fused_decode_attention_workspace_bytes(1, 3, 64, 4), std::invalid_argument);
  CHECK_THROWS_AS(fused_decode_attention_workspace_bytes(1, 2, 64, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ladder
