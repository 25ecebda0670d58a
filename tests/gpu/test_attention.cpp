// tests/gpu/test_attention.cpp - kernels/attention (causal attention, decode attention,
// the KV cache grown by one position, KV store of a whole sequence) against
// reference::causal_attention, reference::decode_attention and plain CPU loops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/attention.cuh"
#include "tests/gpu/attention_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr double kTolerance = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using test::HeadShape;
// D = 64 (one head; GPT-2's twelve), 25 (not a multiple of 4: scalar path), 128 (the
// largest head size), 32.
const HeadShape kHeadShapes[] = {{64, 1}, {768, 12}, {100, 4}, {256, 2}, {96, 3}};

/// launch_decode_attention's output [B, C], written into a poisoned buffer, for the queries
/// `q` (rows q_row_stride floats apart) over positions 0 .. L - 1 of `cache`.
std::vector<float> decode_attention_output(const std::vector<float>& q, int q_row_stride,
                                           const test::DeviceKVCache& cache, int L,
                                           const test::DeviceStream& stream) {
  const auto [B, H, C, capacity] = cache.shape();
  const test::DeviceArray<float> q_device(q);
  test::DeviceArray<float> out = test::poisoned_floats(static_cast<std::size_t>(B) * C);
  launch_decode_attention(q_device.get(), q_row_stride, cache.keys(), cache.values(), out.get(), B,
                          L, capacity, H, C, stream.get());
  stream.synchronize();
  return out.download();
}

/// `cache` [B, H, L, D] one position longer, [B, H, L + 1, D], with position L zero.
test::HostKVCache one_position_longer(const test::HostKVCache& cache) {
  const test::KVCacheShape& shape = cache.shape;
  test::KVCacheShape longer_shape = shape;
  ++longer_shape.capacity;
  test::HostKVCache longer = test::constant_kv_cache(longer_shape, 0.0f, 0.0f);
  const int L = shape.capacity;
  for (int b = 0; b < shape.B; ++b) {
    for (int h = 0; h < shape.H; ++h) {
      const auto from = static_cast<std::ptrdiff_t>(shape.index(b, h, 0));
      const auto to = static_cast<std::ptrdiff_t>(longer_shape.index(b, h, 0));
      std::copy_n(cache.keys.begin() + from, L * shape.D(), longer.keys.begin() + to);
      std::copy_n(cache.values.begin() + from, L * shape.D(), longer.values.begin() + to);
    }
  }
  return longer;
}

TEST_CASE("launch_causal_attention matches the reference", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const auto [C, H] : kHeadShapes) {
    for (const int B : {1, 2}) {
      for (const int T : {1, 5, 130}) {
        CAPTURE(B, T, H, C);
        const std::size_t rows = static_cast<std::size_t>(B) * T;
        const std::vector<float> qkv = test::random_qkv(rng, rows, C);
        const test::DeviceArray<float> qkv_device(qkv);
        test::DeviceArray<float> out = test::poisoned_floats(rows * C);

        launch_causal_attention(qkv_device.get(), out.get(), B, T, H, C, stream.get());
        stream.synchronize();

        const std::vector<float> expected = test::expected_causal_attention(qkv, B, T, H, C);
        CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
      }
    }
  }
}

TEST_CASE("launch_decode_attention matches the reference and ignores positions >= L", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const auto [C, H] : kHeadShapes) {
    for (const int B : {1, 3}) {
      for (const int L : {1, 33, 257}) {
        for (const int spare : {0, 7}) {
          const int capacity = L + spare;
          CAPTURE(B, L, capacity, H, C);
          const std::vector<float> qkv = test::random_qkv(rng, B, C);  // the step's qkv [B, 3C]
          const test::HostKVCache cache = test::random_kv_cache(rng, {B, H, C, capacity});
          // On the device, every position >= L holds NaN: reading one poisons the output.
          test::HostKVCache poisoned = cache;
          poisoned.fill_from(L, kNaN);
          const test::DeviceKVCache poisoned_device(poisoned);
          const std::vector<float> expected = test::expected_decode_attention(qkv, cache, L);

          // q read in place from the qkv buffer (row stride 3C), then from its own [B, C] buffer.
          CHECK(test::checked_relative_error(
                    decode_attention_output(qkv, 3 * C, poisoned_device, L, stream), expected) <=
                kTolerance);
          CHECK(test::checked_relative_error(decode_attention_output(test::queries_of(qkv, B, C), C,
                                                                     poisoned_device, L, stream),
                                             expected) <= kTolerance);
        }
      }
    }
  }
}

TEST_CASE("launch_grow_kv_cache copies the cache one position longer and appends", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const auto [C, H] : kHeadShapes) {
    for (const int B : {1, 3}) {
      for (const int L : {0, 1, 7, 33}) {
        for (const bool aligned : {true, false}) {
          CAPTURE(B, L, H, C, aligned);
          const std::vector<float> qkv = test::random_qkv(rng, B, C);
          const test::HostKVCache cache = test::random_kv_cache(rng, {B, H, C, L});
          // One float past a 16-byte boundary forces the scalar path.
          const std::size_t shift = aligned ? 0 : 1;
          const test::DeviceArray<float> qkv_device(test::with_leading_zeros(qkv, shift));
          const test::DeviceKVCache cache_device(cache);  // null pointers for L = 0
          const test::DeviceKVCache grown = test::DeviceKVCache::poisoned({B, H, C, L + 1});

          launch_grow_kv_cache(qkv_device.get() + shift, cache_device.keys(), cache_device.values(),
                               grown.keys(), grown.values(), L, B, H, C, stream.get());
          stream.synchronize();

          test::HostKVCache expected = one_position_longer(cache);
          expected.store(qkv, L);
          test::check_same_bits(grown, expected);
        }
      }
    }
  }
}

TEST_CASE("launch_store_kv_sequence writes exactly positions first .. first + T - 1", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const auto [C, H] : kHeadShapes) {
    for (const int B : {1, 3}) {
      for (const int T : {1, 7, 70}) {
        for (const int first_position : {0, 5}) {
          for (const int spare : {0, 3}) {
            const int capacity = first_position + T + spare;
            CAPTURE(B, T, first_position, capacity, H, C);
            const std::vector<float> qkv =
                test::random_qkv(rng, static_cast<std::size_t>(B) * T, C);
            const test::DeviceArray<float> qkv_device(qkv);
            const test::KVCacheShape shape{B, H, C, capacity};
            const test::DeviceKVCache cache = test::DeviceKVCache::poisoned(shape);

            launch_store_kv_sequence(qkv_device.get(), cache.keys(), cache.values(), first_position,
                                     T, capacity, B, H, C, stream.get());
            stream.synchronize();

            // Every position the call does not own keeps the poison's bit pattern.
            test::HostKVCache expected = test::poison_pattern(shape);
            for (int t = 0; t < T; ++t)
              expected.store(test::rows_at_step(qkv, B, T, t, 3 * C), first_position + t);
            test::check_same_bits(cache, expected);
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

  for (const auto [C, H] : kHeadShapes) {
    for (const int B : {1, 3}) {
      for (const int T : {1, 33, 130}) {
        const int capacity = T + 5;
        CAPTURE(B, T, capacity, H, C);
        const std::vector<float> qkv = test::random_qkv(rng, static_cast<std::size_t>(B) * T, C);
        const test::DeviceArray<float> qkv_device(qkv);
        const test::DeviceKVCache cache = test::DeviceKVCache::poisoned({B, H, C, capacity});
        test::DeviceArray<float> out = test::poisoned_floats(static_cast<std::size_t>(B) * C);

        launch_store_kv_sequence(qkv_device.get(), cache.keys(), cache.values(),
                                 /*first_position=*/0, T, capacity, B, H, C, stream.get());
        // Row b's last query is qkv row b * T + T - 1: the queries lie T * 3C floats apart.
        const float* last_queries = qkv_device.get() + static_cast<std::size_t>(T - 1) * 3 * C;
        launch_decode_attention(last_queries, T * 3 * C, cache.keys(), cache.values(), out.get(), B,
                                /*L=*/T, capacity, H, C, stream.get());
        stream.synchronize();

        const std::vector<float> expected =
            test::rows_at_step(test::expected_causal_attention(qkv, B, T, H, C), B, T, T - 1, C);
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

  for (const auto [C, H] : kHeadShapes) {
    CAPTURE(H, C);
    const std::vector<float> qkv = test::random_qkv(rng, static_cast<std::size_t>(B) * T, C);
    const test::DeviceArray<float> qkv_device(qkv);
    test::DeviceArray<float> whole = test::poisoned_floats(static_cast<std::size_t>(B) * T * C);
    launch_causal_attention(qkv_device.get(), whole.get(), B, T, H, C, stream.get());
    stream.synchronize();
    const std::vector<float> whole_result = whole.download();

    // Two caches of `capacity` positions in ping-pong: step t grows the one holding t
    // positions into the other, as a length-(t + 1) cache (capacity = t + 1).
    const test::DeviceKVCache caches[2] = {test::DeviceKVCache::poisoned({B, H, C, capacity}),
                                           test::DeviceKVCache::poisoned({B, H, C, capacity})};
    test::DecodeSteps steps(qkv, B, T, C);
    for (int t = 0; t < T; ++t) {
      CAPTURE(t);
      steps.begin(t);
      const test::DeviceKVCache& from = caches[t % 2];
      const test::DeviceKVCache& to = caches[1 - t % 2];
      launch_grow_kv_cache(steps.qkv(), from.keys(), from.values(), to.keys(), to.values(),
                           /*L=*/t, B, H, C, stream.get());
      launch_decode_attention(steps.qkv(), 3 * C, to.keys(), to.values(), steps.out(), B, t + 1,
                              /*capacity=*/t + 1, H, C, stream.get());
      stream.synchronize();
      REQUIRE(steps.relative_error(whole_result, t) <= kTolerance);
    }
  }
}

TEST_CASE("attention launchers reject bad arguments", "[kernels]") {
  test::DeviceArray<float> buffer(std::size_t{4} * 3 * 64);
  const float* in = buffer.get();
  float* out = buffer.get();

  // causal attention: (qkv, out, B, T, H, C)
  const auto causal = test::on_default_stream(launch_causal_attention);
  CHECK_THROWS_AS(causal(in, out, 0, 4, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(causal(in, out, 1, 0, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(causal(in, out, 1, 4, 0, 64), std::invalid_argument);
  CHECK_THROWS_AS(causal(in, out, 1, 4, 3, 64), std::invalid_argument);
  CHECK_THROWS_AS(causal(in, out, 1, 4, 1, 256), std::invalid_argument);  // D > kMaxHeadDim
  test::check_rejects_each_null_pointer(causal, in, out, 1, 4, 2, 64);

  // decode attention: (q, q_row_stride, keys, values, out, B, L, capacity, H, C)
  const auto decode = test::on_default_stream(launch_decode_attention);
  CHECK_THROWS_AS(decode(in, 64, in, in, out, 0, 1, 4, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(decode(in, 64, in, in, out, 1, 0, 4, 2, 64), std::invalid_argument);
  // L > capacity; C % H != 0; q_row_stride < C
  CHECK_THROWS_AS(decode(in, 64, in, in, out, 1, 5, 4, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(decode(in, 64, in, in, out, 1, 1, 4, 3, 64), std::invalid_argument);
  CHECK_THROWS_AS(decode(in, 63, in, in, out, 1, 1, 4, 2, 64), std::invalid_argument);
  test::check_rejects_each_null_pointer(decode, in, 64, in, in, out, 1, 1, 4, 2, 64);

  // grow: (qkv, keys, values, new_keys, new_values, L, B, H, C); the old keys and values
  // are needed when L > 0, so every pointer is.
  const auto grow = test::on_default_stream(launch_grow_kv_cache);
  CHECK_THROWS_AS(grow(in, in, in, out, out, -1, 1, 2, 64), std::invalid_argument);  // L < 0
  CHECK_THROWS_AS(grow(in, in, in, out, out, 1, 0, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(grow(in, in, in, out, out, 1, 1, 3, 64), std::invalid_argument);  // C % H != 0
  test::check_rejects_each_null_pointer(grow, in, in, in, out, out, 1, 1, 2, 64);

  // store a sequence: (qkv, keys, values, first_position, T, capacity, B, H, C)
  const auto store = test::on_default_stream(launch_store_kv_sequence);
  // first_position + T > capacity
  CHECK_THROWS_AS(store(in, out, out, 2, 3, 4, 1, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(store(in, out, out, -1, 2, 4, 1, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(store(in, out, out, 0, 0, 4, 1, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(store(in, out, out, 0, 2, 0, 1, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(store(in, out, out, 0, 2, 4, 0, 2, 64), std::invalid_argument);
  CHECK_THROWS_AS(store(in, out, out, 0, 2, 4, 1, 3, 64), std::invalid_argument);  // C % H != 0
  test::check_rejects_each_null_pointer(store, in, out, out, 0, 2, 4, 1, 2, 64);
}

}  // namespace
}  // namespace ladder
