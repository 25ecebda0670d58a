// tests/gpu/test_attention.cpp - kernels/attention (causal attention, decode attention,
// the KV cache grown by one position, KV store of a whole sequence) against
// reference::causal_attention, reference::decode_attention and plain CPU loops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/attention.cuh"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr double kTolerance = 1e-5;

struct HeadShape {
  int C;
  int H;
};
// D = 64 (one head; GPT-2's twelve), 25 (not a multiple of 4: scalar path), 128 (the
// largest head size), 32.
const HeadShape kHeadShapes[] = {{64, 1}, {768, 12}, {100, 4}, {256, 2}, {96, 3}};

TEST_CASE("launch_causal_attention matches the reference", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const HeadShape shape : kHeadShapes) {
    for (const int B : {1, 2}) {
      for (const int T : {1, 5, 130}) {
        const int C = shape.C;
        const int H = shape.H;
        CAPTURE(B, T, H, C);
        const std::size_t rows = static_cast<std::size_t>(B) * T;
        const std::vector<float> qkv = test::random_qkv(rng, rows, C);
        const test::DeviceArray<float> qkv_device(qkv);
        test::DeviceArray<float> out(rows * C);
        out.poison();

        launch_causal_attention(qkv_device.get(), out.get(), B, T, H, C, stream.get());
        stream.synchronize();

        std::vector<float> expected(rows * C);
        reference::causal_attention(qkv.data(), expected.data(), B, T, H, C);
        CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
      }
    }
  }
}

TEST_CASE("launch_decode_attention matches the reference and ignores positions >= L", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const HeadShape shape : kHeadShapes) {
    for (const int B : {1, 3}) {
      for (const int L : {1, 33, 257}) {
        for (const int spare : {0, 7}) {
          const int C = shape.C;
          const int H = shape.H;
          const int D = C / H;
          const int capacity = L + spare;
          CAPTURE(B, L, capacity, H, C);

          // The step's qkv [B, 3C]; q is read in place from it (row stride 3C).
          const std::vector<float> qkv = test::random_qkv(rng, B, C);
          std::vector<float> q(static_cast<std::size_t>(B) * C);
          for (int b = 0; b < B; ++b)
            for (int c = 0; c < C; ++c)
              q[static_cast<std::size_t>(b) * C + c] = qkv[static_cast<std::size_t>(b) * 3 * C + c];

          const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
          const std::vector<float> keys = test::random_uniform(rng, cache_size, -2.0f, 2.0f);
          const std::vector<float> values = test::random_uniform(rng, cache_size, -1.0f, 1.0f);
          // On the device, every position >= L holds NaN: reading one poisons the output.
          std::vector<float> keys_poisoned = keys;
          std::vector<float> values_poisoned = values;
          for (std::size_t i = 0; i < cache_size; ++i) {
            if (static_cast<int>((i / D) % capacity) >= L) {
              keys_poisoned[i] = std::numeric_limits<float>::quiet_NaN();
              values_poisoned[i] = std::numeric_limits<float>::quiet_NaN();
            }
          }
          const test::DeviceArray<float> keys_device(keys_poisoned);
          const test::DeviceArray<float> values_device(values_poisoned);

          std::vector<float> expected(static_cast<std::size_t>(B) * C);
          reference::decode_attention(q.data(), keys.data(), values.data(), expected.data(), B, L,
                                      capacity, H, C);

          {  // q read in place from the qkv buffer
            const test::DeviceArray<float> qkv_device(qkv);
            test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
            out.poison();
            launch_decode_attention(qkv_device.get(), 3 * C, keys_device.get(), values_device.get(),
                                    out.get(), B, L, capacity, H, C, stream.get());
            stream.synchronize();
            CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
          }
          {  // q from its own [B, C] buffer
            const test::DeviceArray<float> q_device(q);
            test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
            out.poison();
            launch_decode_attention(q_device.get(), C, keys_device.get(), values_device.get(),
                                    out.get(), B, L, capacity, H, C, stream.get());
            stream.synchronize();
            CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
          }
        }
      }
    }
  }
}

TEST_CASE("launch_grow_kv_cache copies the cache one position longer and appends", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const HeadShape shape : kHeadShapes) {
    for (const int B : {1, 3}) {
      for (const int L : {0, 1, 7, 33}) {
        for (const bool aligned : {true, false}) {
          const int C = shape.C;
          const int H = shape.H;
          const int D = C / H;
          CAPTURE(B, L, H, C, aligned);
          const std::vector<float> qkv = test::random_qkv(rng, B, C);
          const std::size_t old_size = static_cast<std::size_t>(B) * H * L * D;
          const std::vector<float> keys = test::random_uniform(rng, old_size, -1.0f, 1.0f);
          const std::vector<float> values = test::random_uniform(rng, old_size, -1.0f, 1.0f);
          // One float past a 16-byte boundary forces the scalar path.
          const std::size_t shift = aligned ? 0 : 1;
          std::vector<float> shifted_qkv(qkv.size() + shift, 0.0f);
          std::copy(qkv.begin(), qkv.end(),
                    shifted_qkv.begin() + static_cast<std::ptrdiff_t>(shift));
          const test::DeviceArray<float> qkv_device(shifted_qkv);
          const test::DeviceArray<float> keys_device(keys.empty() ? std::vector<float>{0.0f}
                                                                  : keys);
          const test::DeviceArray<float> values_device(values.empty() ? std::vector<float>{0.0f}
                                                                      : values);
          const std::size_t new_size = static_cast<std::size_t>(B) * H * (L + 1) * D;
          test::DeviceArray<float> new_keys(new_size);
          test::DeviceArray<float> new_values(new_size);
          new_keys.poison();
          new_values.poison();

          launch_grow_kv_cache(qkv_device.get() + shift, L > 0 ? keys_device.get() : nullptr,
                               L > 0 ? values_device.get() : nullptr, new_keys.get(),
                               new_values.get(), L, B, H, C, stream.get());
          stream.synchronize();

          std::vector<float> expected_keys(new_size);
          std::vector<float> expected_values(new_size);
          for (int b = 0; b < B; ++b) {
            for (int h = 0; h < H; ++h) {
              for (int s = 0; s <= L; ++s) {
                for (int d = 0; d < D; ++d) {
                  const std::size_t head = static_cast<std::size_t>(b) * H + h;
                  const std::size_t slot = (head * (L + 1) + s) * D + d;
                  if (s < L) {
                    expected_keys[slot] = keys[(head * L + s) * D + d];
                    expected_values[slot] = values[(head * L + s) * D + d];
                  } else {
                    const std::size_t key_column = static_cast<std::size_t>(b) * 3 * C + C +
                                                   static_cast<std::size_t>(h) * D + d;
                    expected_keys[slot] = qkv[key_column];
                    expected_values[slot] = qkv[key_column + C];
                  }
                }
              }
            }
          }
          CHECK(new_keys.download() == expected_keys);
          CHECK(new_values.download() == expected_values);
        }
      }
    }
  }
}

/// The bit pattern of a float, so that a poisoned (NaN) element compares exactly.
std::uint32_t bits_of(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// How many elements of `actual` differ bit for bit from `expected` (a size mismatch
/// counts every element).
std::size_t count_bit_mismatches(const std::vector<float>& actual,
                                 const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return std::max(actual.size(), expected.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (bits_of(actual[i]) != bits_of(expected[i])) ++mismatches;
  return mismatches;
}

TEST_CASE("launch_store_kv_sequence writes exactly positions first .. first + T - 1", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const HeadShape shape : kHeadShapes) {
    for (const int B : {1, 3}) {
      for (const int T : {1, 7, 70}) {
        for (const int first_position : {0, 5}) {
          for (const int spare : {0, 3}) {
            const int C = shape.C;
            const int H = shape.H;
            const int D = C / H;
            const int capacity = first_position + T + spare;
            CAPTURE(B, T, first_position, capacity, H, C);
            const std::vector<float> qkv =
                test::random_qkv(rng, static_cast<std::size_t>(B) * T, C);
            const test::DeviceArray<float> qkv_device(qkv);
            const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
            test::DeviceArray<float> keys(cache_size);
            test::DeviceArray<float> values(cache_size);
            keys.poison();
            values.poison();

            launch_store_kv_sequence(qkv_device.get(), keys.get(), values.get(), first_position, T,
                                     capacity, B, H, C, stream.get());
            stream.synchronize();

            // Every position the call does not own keeps the poison's bit pattern.
            std::vector<float> expected_keys(cache_size);
            std::memset(expected_keys.data(), 0xFF, cache_size * sizeof(float));
            std::vector<float> expected_values = expected_keys;
            for (int b = 0; b < B; ++b) {
              for (int t = 0; t < T; ++t) {
                for (int h = 0; h < H; ++h) {
                  for (int d = 0; d < D; ++d) {
                    const std::size_t slot =
                        ((static_cast<std::size_t>(b) * H + h) * capacity + first_position + t) *
                            D +
                        d;
                    const std::size_t key_column = (static_cast<std::size_t>(b) * T + t) * 3 * C +
                                                   C + static_cast<std::size_t>(h) * D + d;
                    expected_keys[slot] = qkv[key_column];
                    expected_values[slot] = qkv[key_column + C];
                  }
                }
              }
            }
            CHECK(count_bit_mismatches(keys.download(), expected_keys) == 0);
            CHECK(count_bit_mismatches(values.download(), expected_values) == 0);
          }
        }
      }
    }
  }
}

// The prefill's path: a prompt's keys and values stored at once, then each row's last
// query attends over the cache; that must equal causal attention's last position. The
// cache has spare positions beyond the prompt, poisoned: reading one shows as NaN.
TEST_CASE("store_kv_sequence + decode_attention reproduce causal attention's last position",
          "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const HeadShape shape : kHeadShapes) {
    for (const int B : {1, 3}) {
      for (const int T : {1, 33, 130}) {
        const int C = shape.C;
        const int H = shape.H;
        const int D = C / H;
        const int capacity = T + 5;
        CAPTURE(B, T, capacity, H, C);
        const std::size_t rows = static_cast<std::size_t>(B) * T;
        const std::vector<float> qkv = test::random_qkv(rng, rows, C);
        const test::DeviceArray<float> qkv_device(qkv);
        const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
        test::DeviceArray<float> keys(cache_size);
        test::DeviceArray<float> values(cache_size);
        keys.poison();
        values.poison();
        test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
        out.poison();

        launch_store_kv_sequence(qkv_device.get(), keys.get(), values.get(), /*first_position=*/0,
                                 T, capacity, B, H, C, stream.get());
        // Row b's last query is qkv row b * T + T - 1: the queries lie T * 3C floats apart.
        const float* last_queries = qkv_device.get() + static_cast<std::size_t>(T - 1) * 3 * C;
        launch_decode_attention(last_queries, T * 3 * C, keys.get(), values.get(), out.get(), B,
                                /*L=*/T, capacity, H, C, stream.get());
        stream.synchronize();

        std::vector<float> whole(rows * C);
        reference::causal_attention(qkv.data(), whole.data(), B, T, H, C);
        const std::vector<float> expected = test::rows_at_step(whole, B, T, T - 1, C);
        CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
      }
    }
  }
}

// A whole sequence two ways: causal attention at once, and token by token through the
// cache as chapter 02 grows it (grow_kv_cache, then decode_attention over positions
// 0 .. t). Every cache length from 1 to T is exercised, and the two kernels must agree
// on every output row.
TEST_CASE("grow_kv_cache + decode_attention reproduce causal_attention step by step", "[kernels]") {
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
    const test::DeviceArray<float> qkv_device(qkv);
    test::DeviceArray<float> whole(static_cast<std::size_t>(B) * T * C);
    whole.poison();
    launch_causal_attention(qkv_device.get(), whole.get(), B, T, H, C, stream.get());
    stream.synchronize();
    const std::vector<float> whole_result = whole.download();

    // Two caches of `capacity` positions in ping-pong: step t grows the one holding t
    // positions into the other, as a length-(t + 1) cache (capacity = t + 1).
    const std::size_t cache_size = static_cast<std::size_t>(B) * H * capacity * D;
    test::DeviceArray<float> keys[2] = {test::DeviceArray<float>(cache_size),
                                        test::DeviceArray<float>(cache_size)};
    test::DeviceArray<float> values[2] = {test::DeviceArray<float>(cache_size),
                                          test::DeviceArray<float>(cache_size)};
    for (int i = 0; i < 2; ++i) {
      keys[i].poison();
      values[i].poison();
    }
    test::DeviceArray<float> step_qkv(static_cast<std::size_t>(B) * 3 * C);
    test::DeviceArray<float> step_out(static_cast<std::size_t>(B) * C);
    for (int t = 0; t < T; ++t) {
      CAPTURE(t);
      const std::vector<float> expected = test::rows_at_step(whole_result, B, T, t, C);
      step_qkv.upload(test::rows_at_step(qkv, B, T, t, 3 * C));
      step_out.poison();
      const int from = t % 2;
      const int to = 1 - from;
      launch_grow_kv_cache(step_qkv.get(), keys[from].get(), values[from].get(), keys[to].get(),
                           values[to].get(), /*L=*/t, B, H, C, stream.get());
      launch_decode_attention(step_qkv.get(), 3 * C, keys[to].get(), values[to].get(),
                              step_out.get(), B, t + 1, /*capacity=*/t + 1, H, C, stream.get());
      stream.synchronize();
      REQUIRE(test::checked_relative_error(step_out.download(), expected) <= kTolerance);
    }
  }
}

TEST_CASE("attention launchers reject bad arguments", "[kernels]") {
  test::DeviceArray<float> buffer(std::size_t{4} * 3 * 64);
  const float* in = buffer.get();
  float* out = buffer.get();
  // causal attention: (qkv, out, B, T, H, C)
  CHECK_THROWS_AS(launch_causal_attention(in, out, 0, 4, 2, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_causal_attention(in, out, 1, 0, 2, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_causal_attention(in, out, 1, 4, 0, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_causal_attention(in, out, 1, 4, 3, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_causal_attention(in, out, 1, 4, 1, 256, nullptr),
                  std::invalid_argument);  // D = 256 > kMaxHeadDim
  CHECK_THROWS_AS(launch_causal_attention(nullptr, out, 1, 4, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_causal_attention(in, nullptr, 1, 4, 2, 64, nullptr),
                  std::invalid_argument);
  // decode attention: (q, q_row_stride, keys, values, out, B, L, capacity, H, C)
  CHECK_THROWS_AS(launch_decode_attention(in, 64, in, in, out, 0, 1, 4, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_decode_attention(in, 64, in, in, out, 1, 0, 4, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_decode_attention(in, 64, in, in, out, 1, 5, 4, 2, 64, nullptr),
                  std::invalid_argument);  // L > capacity
  CHECK_THROWS_AS(launch_decode_attention(in, 64, in, in, out, 1, 1, 4, 3, 64, nullptr),
                  std::invalid_argument);  // C % H != 0
  CHECK_THROWS_AS(launch_decode_attention(in, 63, in, in, out, 1, 1, 4, 2, 64, nullptr),
                  std::invalid_argument);  // q_row_stride < C
  CHECK_THROWS_AS(launch_decode_attention(nullptr, 64, in, in, out, 1, 1, 4, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_decode_attention(in, 64, nullptr, in, out, 1, 1, 4, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_decode_attention(in, 64, in, nullptr, out, 1, 1, 4, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_decode_attention(in, 64, in, in, nullptr, 1, 1, 4, 2, 64, nullptr),
                  std::invalid_argument);
  // grow: (qkv, keys, values, new_keys, new_values, L, B, H, C)
  CHECK_THROWS_AS(launch_grow_kv_cache(in, in, in, out, out, -1, 1, 2, 64, nullptr),
                  std::invalid_argument);  // L < 0
  CHECK_THROWS_AS(launch_grow_kv_cache(in, in, in, out, out, 1, 0, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_grow_kv_cache(in, in, in, out, out, 1, 1, 3, 64, nullptr),
                  std::invalid_argument);  // C % H != 0
  CHECK_THROWS_AS(launch_grow_kv_cache(nullptr, in, in, out, out, 1, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_grow_kv_cache(in, nullptr, in, out, out, 1, 1, 2, 64, nullptr),
                  std::invalid_argument);  // old keys needed when L > 0
  CHECK_THROWS_AS(launch_grow_kv_cache(in, in, nullptr, out, out, 1, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_grow_kv_cache(in, in, in, nullptr, out, 1, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_grow_kv_cache(in, in, in, out, nullptr, 1, 1, 2, 64, nullptr),
                  std::invalid_argument);
  // store a sequence: (qkv, keys, values, first_position, T, capacity, B, H, C)
  CHECK_THROWS_AS(launch_store_kv_sequence(in, out, out, 2, 3, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);  // first_position + T > capacity
  CHECK_THROWS_AS(launch_store_kv_sequence(in, out, out, -1, 2, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_store_kv_sequence(in, out, out, 0, 0, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_store_kv_sequence(in, out, out, 0, 2, 0, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_store_kv_sequence(in, out, out, 0, 2, 4, 0, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_store_kv_sequence(in, out, out, 0, 2, 4, 1, 3, 64, nullptr),
                  std::invalid_argument);  // C % H != 0
  CHECK_THROWS_AS(launch_store_kv_sequence(nullptr, out, out, 0, 2, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_store_kv_sequence(in, nullptr, out, 0, 2, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_store_kv_sequence(in, out, nullptr, 0, 2, 4, 1, 2, 64, nullptr),
                  std::invalid_argument);
}

}  // namespace
}  // namespace ladder
