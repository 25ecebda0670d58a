// tests/gpu/test_cache_attention.cpp - kernels/cache_attention (KV append, static-cache
// attention and fused append + flash-decoding attention, position read from the device)
// against reference::decode_attention and reference::causal_attention.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr double kTolerance = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct HeadShape {
  int C;
  int H;
};
// D = 64 (one head; GPT-2's twelve), 25 (not a multiple of 4: scalar path), 128 (the
// largest head size).
const HeadShape kHeadShapes[] = {{64, 1}, {768, 12}, {100, 4}, {256, 2}};

/// The q third of qkv [B, 3C], as its own [B, C] array.
std::vector<float> queries_of(const std::vector<float>& qkv, int B, int C) {
  std::vector<float> q(static_cast<std::size_t>(B) * C);
  for (int b = 0; b < B; ++b)
    std::copy_n(qkv.begin() + static_cast<std::ptrdiff_t>(b) * 3 * C, C,
                q.begin() + static_cast<std::ptrdiff_t>(b) * C);
  return q;
}

/// Index of (b, h, s, d = 0) in a [B, H, capacity, D] cache.
std::size_t cache_row(int b, int h, int s, int H, int capacity, int D) {
  return ((static_cast<std::size_t>(b) * H + h) * capacity + s) * D;
}

/// Overwrites position s of every (b, h) with `fill`.
void fill_position(std::vector<float>& cache, int s, float fill, int B, int H, int capacity,
                   int D) {
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      std::fill_n(cache.begin() + static_cast<std::ptrdiff_t>(cache_row(b, h, s, H, capacity, D)),
                  D, fill);
}

/// Writes the step's k (or v, for third = 2) of qkv [B, 3C] into position s of the cache.
void store_position(std::vector<float>& cache, const std::vector<float>& qkv, int third, int s,
                    int B, int H, int C, int capacity) {
  const int D = C / H;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      std::copy_n(
          qkv.begin() + (static_cast<std::ptrdiff_t>(b) * 3 + third) * C + std::ptrdiff_t{h} * D, D,
          cache.begin() + static_cast<std::ptrdiff_t>(cache_row(b, h, s, H, capacity, D)));
}

/// Bit-for-bit equality (NaN == NaN when the bits agree).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool any_nan(const std::vector<float>& values) {
  return std::any_of(values.begin(), values.end(), [](float v) { return std::isnan(v); });
}

/// A zero-filled workspace for launch_fused_decode_attention, as the launcher requires.
test::DeviceArray<unsigned char> zeroed_workspace(int B, int H, int C, int capacity) {
  return test::DeviceArray<unsigned char>(
      std::vector<unsigned char>(fused_decode_attention_workspace_bytes(B, H, C, capacity), 0));
}

// ---------------------------------------------------------------- append

TEST_CASE("launch_append_kv_at_cursor writes exactly the cursor's position", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int capacity = 9;

  for (const HeadShape shape : kHeadShapes) {
    for (const int B : {1, 3, 32}) {
      for (const int position : {0, 4, capacity - 1}) {
        const int C = shape.C;
        const int H = shape.H;
        const int D = C / H;
        CAPTURE(B, position, capacity, H, C);
        const std::vector<float> qkv = test::random_qkv(rng, B, C);
        const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
        const std::vector<float> keys = test::random_uniform(rng, cache_size, -1.0f, 1.0f);
        const std::vector<float> values = test::random_uniform(rng, cache_size, -1.0f, 1.0f);
        const test::DeviceArray<float> qkv_device(qkv);
        test::DeviceArray<float> keys_device(keys);
        test::DeviceArray<float> values_device(values);
        const test::DeviceArray<DecodePosition> cursor = test::device_cursor(/*step=*/1, position);

        launch_append_kv_at_cursor(qkv_device.get(), keys_device.get(), values_device.get(),
                                   cursor.get(), capacity, B, H, C, stream.get());
        stream.synchronize();

        std::vector<float> expected_keys = keys;
        std::vector<float> expected_values = values;
        store_position(expected_keys, qkv, 1, position, B, H, C, capacity);
        store_position(expected_values, qkv, 2, position, B, H, C, capacity);
        CHECK(same_bits(keys_device.download(), expected_keys));
        CHECK(same_bits(values_device.download(), expected_values));
      }
    }
  }
}

TEST_CASE("launch_append_kv_at_cursor writes nothing for a cursor outside the cache", "[kernels]") {
  test::DeviceStream stream;
  const int B = 2;
  const int H = 2;
  const int C = 64;
  const int capacity = 5;
  const std::size_t cache_size = static_cast<std::size_t>(B) * C * capacity;
  const test::DeviceArray<float> qkv(std::vector<float>(static_cast<std::size_t>(B) * 3 * C, 1.0f));
  for (const int position : {-1, capacity, capacity + 100}) {
    CAPTURE(position);
    test::DeviceArray<float> keys(cache_size);
    test::DeviceArray<float> values(cache_size);
    keys.poison();
    values.poison();
    const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
    launch_append_kv_at_cursor(qkv.get(), keys.get(), values.get(), cursor.get(), capacity, B, H, C,
                               stream.get());
    stream.synchronize();
    const std::vector<float> keys_after = keys.download();
    const std::vector<float> values_after = values.download();
    CHECK(test::all_nan(keys_after));
    CHECK(test::all_nan(values_after));
  }
}

// ---------------------------------------------------------------- static cache

TEST_CASE("launch_static_cache_attention equals decode attention over positions 0 .. p",
          "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int capacity = 257;

  for (const HeadShape shape : kHeadShapes) {
    for (const int B : {1, 3, 32}) {
      const int C = shape.C;
      const int H = shape.H;
      const int D = C / H;
      const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
      const std::vector<float> keys = test::random_uniform(rng, cache_size, -2.0f, 2.0f);
      const std::vector<float> values = test::random_uniform(rng, cache_size, -1.0f, 1.0f);
      for (const int position : {0, 1, 31, 32, 200, capacity - 1}) {
        CAPTURE(B, position, capacity, H, C);
        const std::vector<float> qkv = test::random_qkv(rng, B, C);
        const std::vector<float> q = queries_of(qkv, B, C);

        // Unused positions hold large finite garbage: the kernel reads them (the mask
        // comes after the scores), so they must not change the result.
        std::vector<float> keys_with_garbage = keys;
        std::vector<float> values_with_garbage = values;
        const std::vector<float> garbage = test::random_uniform(rng, 2 * cache_size, -1e30f, 1e30f);
        for (std::size_t i = 0; i < cache_size; ++i) {
          if (static_cast<int>((i / D) % capacity) > position) {
            keys_with_garbage[i] = garbage[i];
            values_with_garbage[i] = garbage[cache_size + i];
          }
        }
        const test::DeviceArray<float> keys_device(keys_with_garbage);
        const test::DeviceArray<float> values_device(values_with_garbage);
        const test::DeviceArray<DecodePosition> cursor = test::device_cursor(/*step=*/2, position);

        std::vector<float> expected(static_cast<std::size_t>(B) * C);
        reference::decode_attention(q.data(), keys.data(), values.data(), expected.data(), B,
                                    position + 1, capacity, H, C);

        std::vector<float> in_place_result;
        {  // q read in place from the qkv buffer
          const test::DeviceArray<float> qkv_device(qkv);
          test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
          out.poison();
          launch_static_cache_attention(qkv_device.get(), 3 * C, keys_device.get(),
                                        values_device.get(), cursor.get(), capacity, out.get(), B,
                                        H, C, stream.get());
          stream.synchronize();
          in_place_result = out.download();
          CHECK(test::checked_relative_error(in_place_result, expected) <= kTolerance);
        }
        {  // q from its own [B, C] buffer
          const test::DeviceArray<float> q_device(q);
          test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
          out.poison();
          launch_static_cache_attention(q_device.get(), C, keys_device.get(), values_device.get(),
                                        cursor.get(), capacity, out.get(), B, H, C, stream.get());
          stream.synchronize();
          CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
        }
        {  // zeros instead of garbage, the same answer to the bit: masked positions
           // weigh exactly 0
          std::vector<float> keys_clean = keys;
          std::vector<float> values_clean = values;
          for (int s = position + 1; s < capacity; ++s) {
            fill_position(keys_clean, s, 0.0f, B, H, capacity, D);
            fill_position(values_clean, s, 0.0f, B, H, capacity, D);
          }
          const test::DeviceArray<float> keys_zeroed(keys_clean);
          const test::DeviceArray<float> values_zeroed(values_clean);
          const test::DeviceArray<float> qkv_device(qkv);
          test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
          out.poison();
          launch_static_cache_attention(qkv_device.get(), 3 * C, keys_zeroed.get(),
                                        values_zeroed.get(), cursor.get(), capacity, out.get(), B,
                                        H, C, stream.get());
          stream.synchronize();
          CHECK(same_bits(out.download(), in_place_result));
        }
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
  const int B = 1;
  const int H = 12;
  const int C = 768;
  const int D = C / H;
  const int capacity = 300;
  const int position = 10;
  const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
  std::vector<float> keys = test::random_uniform(rng, cache_size, -2.0f, 2.0f);
  std::vector<float> values = test::random_uniform(rng, cache_size, -1.0f, 1.0f);
  const test::DeviceArray<float> qkv(test::random_qkv(rng, B, C));
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);

  SECTION("a NaN key at the last position") {
    fill_position(keys, capacity - 1, kNaN, B, H, capacity, D);
  }
  SECTION("a NaN value at the last position") {
    fill_position(values, capacity - 1, kNaN, B, H, capacity, D);
  }
  const test::DeviceArray<float> keys_device(keys);
  const test::DeviceArray<float> values_device(values);
  // Zeros, not poison: every NaN in the result must come from the kernel.
  test::DeviceArray<float> out(std::vector<float>(static_cast<std::size_t>(B) * C, 0.0f));
  launch_static_cache_attention(qkv.get(), 3 * C, keys_device.get(), values_device.get(),
                                cursor.get(), capacity, out.get(), B, H, C, stream.get());
  stream.synchronize();
  const std::vector<float> result = out.download();
  CHECK(test::all_nan(result));
}

TEST_CASE("launch_static_cache_attention answers NaN for a cursor outside the cache", "[kernels]") {
  test::DeviceStream stream;
  const int B = 3;
  const int H = 2;
  const int C = 64;
  const int capacity = 5;
  const std::size_t cache_size = static_cast<std::size_t>(B) * C * capacity;
  const test::DeviceArray<float> qkv(std::vector<float>(static_cast<std::size_t>(B) * 3 * C, 0.5f));
  const test::DeviceArray<float> keys(std::vector<float>(cache_size, 0.25f));
  const test::DeviceArray<float> values(std::vector<float>(cache_size, 0.75f));
  for (const int position : {-1, capacity}) {
    CAPTURE(position);
    const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
    test::DeviceArray<float> out(std::vector<float>(static_cast<std::size_t>(B) * C, 0.0f));
    launch_static_cache_attention(qkv.get(), 3 * C, keys.get(), values.get(), cursor.get(),
                                  capacity, out.get(), B, H, C, stream.get());
    stream.synchronize();
    const std::vector<float> result = out.download();
    CHECK(test::all_nan(result));
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

  for (const HeadShape shape : kHeadShapes) {
    for (const auto [capacity, B] : kCacheShapes) {
      const int C = shape.C;
      const int H = shape.H;
      const int D = C / H;
      const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
      const std::vector<float> keys = test::random_uniform(rng, cache_size, -2.0f, 2.0f);
      const std::vector<float> values = test::random_uniform(rng, cache_size, -1.0f, 1.0f);
      // Zeroed once; every launch must leave it ready for the next one.
      test::DeviceArray<unsigned char> workspace = zeroed_workspace(B, H, C, capacity);

      for (const int length : {1, 2, 63, 64, 65, 127, 128, 129, 257, 1000, 4300}) {
        if (length > capacity) continue;
        const int position = length - 1;
        CAPTURE(B, length, capacity, H, C);
        const std::vector<float> qkv = test::random_qkv(rng, B, C);
        // Before the step: positions < p valid, p and everything after it NaN. Reading
        // the cache at p (instead of this step's k, v) or after p poisons the output.
        std::vector<float> keys_before = keys;
        std::vector<float> values_before = values;
        for (int s = position; s < capacity; ++s) {
          fill_position(keys_before, s, kNaN, B, H, capacity, D);
          fill_position(values_before, s, kNaN, B, H, capacity, D);
        }
        std::vector<float> keys_after = keys_before;
        std::vector<float> values_after = values_before;
        store_position(keys_after, qkv, 1, position, B, H, C, capacity);
        store_position(values_after, qkv, 2, position, B, H, C, capacity);

        const test::DeviceArray<float> qkv_device(qkv);
        test::DeviceArray<float> keys_device(keys_before);
        test::DeviceArray<float> values_device(values_before);
        const test::DeviceArray<DecodePosition> cursor = test::device_cursor(/*step=*/0, position);
        test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
        out.poison();

        launch_fused_decode_attention(qkv_device.get(), keys_device.get(), values_device.get(),
                                      cursor.get(), capacity, out.get(), workspace.get(), B, H, C,
                                      stream.get());
        stream.synchronize();
        const std::vector<float> result = out.download();

        std::vector<float> expected(static_cast<std::size_t>(B) * C);
        const std::vector<float> q = queries_of(qkv, B, C);
        reference::decode_attention(q.data(), keys_after.data(), values_after.data(),
                                    expected.data(), B, length, capacity, H, C);
        CHECK(test::checked_relative_error(result, expected) <= kTolerance);
        // The cache now holds this step's k, v at p, and nothing else changed.
        CHECK(same_bits(keys_device.download(), keys_after));
        CHECK(same_bits(values_device.download(), values_after));

        // Run again on the cache it has just written: the same answer to the bit (the
        // splits are merged in a fixed order, and the workspace was left ready).
        out.poison();
        launch_fused_decode_attention(qkv_device.get(), keys_device.get(), values_device.get(),
                                      cursor.get(), capacity, out.get(), workspace.get(), B, H, C,
                                      stream.get());
        stream.synchronize();
        CHECK(same_bits(out.download(), result));
      }
    }
  }
}

TEST_CASE("launch_fused_decode_attention takes the scalar path for an unaligned qkv", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int B = 3;
  const int H = 12;
  const int C = 768;
  const int D = C / H;
  const int capacity = 128;
  const int length = 100;
  const int position = length - 1;
  const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
  std::vector<float> keys = test::random_uniform(rng, cache_size, -2.0f, 2.0f);
  std::vector<float> values = test::random_uniform(rng, cache_size, -1.0f, 1.0f);
  const std::vector<float> qkv = test::random_qkv(rng, B, C);
  std::vector<float> shifted(qkv.size() + 1, 0.0f);  // one float past a 16-byte boundary
  std::copy(qkv.begin(), qkv.end(), shifted.begin() + 1);
  const test::DeviceArray<float> qkv_device(shifted);
  test::DeviceArray<float> keys_device(keys);
  test::DeviceArray<float> values_device(values);
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
  test::DeviceArray<unsigned char> workspace = zeroed_workspace(B, H, C, capacity);
  test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
  out.poison();

  launch_fused_decode_attention(qkv_device.get() + 1, keys_device.get(), values_device.get(),
                                cursor.get(), capacity, out.get(), workspace.get(), B, H, C,
                                stream.get());
  stream.synchronize();

  store_position(keys, qkv, 1, position, B, H, C, capacity);
  store_position(values, qkv, 2, position, B, H, C, capacity);
  std::vector<float> expected(static_cast<std::size_t>(B) * C);
  const std::vector<float> q = queries_of(qkv, B, C);
  reference::decode_attention(q.data(), keys.data(), values.data(), expected.data(), B, length,
                              capacity, H, C);
  CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
  CHECK(same_bits(keys_device.download(), keys));
  CHECK(same_bits(values_device.download(), values));
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

  for (const HeadShape shape : kHeadShapes) {
    const int C = shape.C;
    const int H = shape.H;
    const int D = C / H;
    CAPTURE(H, C);
    const std::vector<float> qkv = test::random_qkv(rng, static_cast<std::size_t>(B) * T, C);
    std::vector<float> whole(static_cast<std::size_t>(B) * T * C);
    reference::causal_attention(qkv.data(), whole.data(), B, T, H, C);

    const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
    test::DeviceArray<float> keys(cache_size);
    test::DeviceArray<float> values(cache_size);
    keys.poison();
    values.poison();
    test::DeviceArray<unsigned char> workspace = zeroed_workspace(B, H, C, capacity);
    test::DeviceArray<DecodePosition> cursor(1);
    test::DeviceArray<float> step_qkv(static_cast<std::size_t>(B) * 3 * C);
    test::DeviceArray<float> step_out(static_cast<std::size_t>(B) * C);
    for (int t = 0; t < T; ++t) {
      CAPTURE(t);
      const std::vector<float> expected = test::rows_at_step(whole, B, T, t, C);
      step_qkv.upload(test::rows_at_step(qkv, B, T, t, 3 * C));
      cursor.upload({DecodePosition{t, t}});
      step_out.poison();
      launch_fused_decode_attention(step_qkv.get(), keys.get(), values.get(), cursor.get(),
                                    capacity, step_out.get(), workspace.get(), B, H, C,
                                    stream.get());
      stream.synchronize();
      REQUIRE(test::checked_relative_error(step_out.download(), expected) <= kTolerance);
    }
  }
}

TEST_CASE("launch_fused_decode_attention: a cursor outside the cache gives NaN, no write",
          "[kernels]") {
  test::DeviceStream stream;
  const int B = 3;
  const int H = 2;
  const int C = 64;
  const int capacity = 5;
  const std::size_t cache_size = static_cast<std::size_t>(B) * C * capacity;
  const test::DeviceArray<float> qkv(std::vector<float>(static_cast<std::size_t>(B) * 3 * C, 0.5f));
  test::DeviceArray<unsigned char> workspace = zeroed_workspace(B, H, C, capacity);
  for (const int position : {-1, capacity}) {
    CAPTURE(position);
    const std::vector<float> cache(cache_size, 0.25f);
    test::DeviceArray<float> keys(cache);
    test::DeviceArray<float> values(cache);
    const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
    test::DeviceArray<float> out(std::vector<float>(static_cast<std::size_t>(B) * C, 0.0f));
    launch_fused_decode_attention(qkv.get(), keys.get(), values.get(), cursor.get(), capacity,
                                  out.get(), workspace.get(), B, H, C, stream.get());
    stream.synchronize();
    const std::vector<float> result = out.download();
    CHECK(test::all_nan(result));
    CHECK(keys.download() == cache);
    CHECK(values.download() == cache);
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
  CHECK_THROWS_AS(launch_append_kv_at_cursor(in, out, out, cursor, 0, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_append_kv_at_cursor(in, out, out, cursor, 4, 0, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_append_kv_at_cursor(in, out, out, cursor, 4, 1, 0, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_append_kv_at_cursor(in, out, out, cursor, 4, 1, 2, 0, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_append_kv_at_cursor(in, out, out, cursor, 4, 1, 3, 64, nullptr),
                  std::invalid_argument);  // C % H != 0
  CHECK_THROWS_AS(launch_append_kv_at_cursor(nullptr, out, out, cursor, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_append_kv_at_cursor(in, nullptr, out, cursor, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_append_kv_at_cursor(in, out, nullptr, cursor, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_append_kv_at_cursor(in, out, out, nullptr, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);

  // static: (q, q_row_stride, keys, values, cursor, capacity, out, B, H, C)
  CHECK_THROWS_AS(launch_static_cache_attention(in, 64, in, in, cursor, 4, out, 0, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_static_cache_attention(in, 64, in, in, cursor, 0, out, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_static_cache_attention(in, 64, in, in, cursor, 4, out, 1, 0, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_static_cache_attention(in, 64, in, in, cursor, 4, out, 1, 3, 64, nullptr),
                  std::invalid_argument);  // C % H != 0
  CHECK_THROWS_AS(
      launch_static_cache_attention(in, 256, in, in, cursor, 4, out, 1, 1, 256, nullptr),
      std::invalid_argument);  // D = 256 > kMaxHeadDim
  CHECK_THROWS_AS(launch_static_cache_attention(in, 63, in, in, cursor, 4, out, 1, 2, 64, nullptr),
                  std::invalid_argument);  // q_row_stride < C
  CHECK_THROWS_AS(
      launch_static_cache_attention(nullptr, 64, in, in, cursor, 4, out, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_static_cache_attention(in, 64, nullptr, in, cursor, 4, out, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_static_cache_attention(in, 64, in, nullptr, cursor, 4, out, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(launch_static_cache_attention(in, 64, in, in, nullptr, 4, out, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      launch_static_cache_attention(in, 64, in, in, cursor, 4, nullptr, 1, 2, 64, nullptr),
      std::invalid_argument);

  // fused: (qkv, keys, values, cursor, capacity, out, workspace, B, H, C)
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, out, cursor, 4, out, workspace, 0, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, out, cursor, 0, out, workspace, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, out, cursor, 4, out, workspace, 1, 0, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, out, cursor, 4, out, workspace, 1, 3, 64, nullptr),
      std::invalid_argument);  // C % H != 0
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, out, cursor, 4, out, workspace, 1, 1, 256, nullptr),
      std::invalid_argument);  // D = 256 > kMaxHeadDim
  CHECK_THROWS_AS(launch_fused_decode_attention(nullptr, out, out, cursor, 4, out, workspace, 1, 2,
                                                64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, nullptr, out, cursor, 4, out, workspace, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, nullptr, cursor, 4, out, workspace, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, out, nullptr, 4, out, workspace, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, out, cursor, 4, nullptr, workspace, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_fused_decode_attention(in, out, out, cursor, 4, out, nullptr, 1, 2, 64, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(launch_fused_decode_attention(in, out, out, cursor, 4, out,
                                                workspace_array.get() + 4, 1, 2, 64, nullptr),
                  std::invalid_argument);  // misaligned workspace

  // workspace size: (B, H, C, capacity)
  CHECK_THROWS_AS(fused_decode_attention_workspace_bytes(0, 2, 64, 4), std::invalid_argument);
  CHECK_THROWS_AS(fused_decode_attention_workspace_bytes(1, 0, 64, 4), std::invalid_argument);
  CHECK_THROWS_AS(fused_decode_attention_workspace_bytes(1, 3, 64, 4), std::invalid_argument);
  CHECK_THROWS_AS(fused_decode_attention_workspace_bytes(1, 2, 64, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ladder
