// tests/gpu/test_cache_attention_bf16.cpp - kernels/cache_attention_bf16 against
// reference::decode_attention on a bf16 cache and a bf16 qkv, the output rounded to bf16
// (common/reference.hpp, R4 and R5): one bf16 step where the rounding flips, plus a
// slack of 1e-5 of the largest output for the fp32 softmax's own error; the appended
// keys and values exactly the bf16 of qkv; positions after p never read (NaN there).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/cache_attention_bf16.cuh"
#include "tests/gpu/bfloat16_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr double kSlack = 1e-5;
constexpr std::uint16_t kNanBits = 0xFFFF;

struct AttentionCase {
  int B;
  int H;
  int C;
  int capacity;
  int p;
};

/// Index of (b, h, s, d) in a [B, H, capacity, D] cache.
std::size_t cache_index(const AttentionCase& c, int b, int h, int s, int d) {
  const int D = c.C / c.H;
  return ((static_cast<std::size_t>(b) * c.H + h) * c.capacity + s) * D + d;
}

struct AttentionResult {
  std::vector<float> out;
  std::vector<std::uint16_t> keys;
  std::vector<std::uint16_t> values;
};

AttentionResult run_attention(const test::DeviceStream& stream, const AttentionCase& c,
                              const std::vector<float>& qkv, const std::vector<std::uint16_t>& keys,
                              const std::vector<std::uint16_t>& values, int cursor_position) {
  const test::DeviceBfloats qkv_device(test::to_bfloat16_bits(qkv));
  test::DeviceBfloats keys_device(keys);
  test::DeviceBfloats values_device(values);
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, cursor_position);
  test::DeviceBfloats out(static_cast<std::size_t>(c.B) * c.C);
  out.poison();
  launch_decode_attention_bf16(test::as_bfloat16(qkv_device), test::as_bfloat16(keys_device),
                               test::as_bfloat16(values_device), cursor.get(), c.capacity,
                               test::as_bfloat16(out), c.B, c.H, c.C, stream.get());
  stream.synchronize();
  return AttentionResult{test::from_bfloat16_bits(out.download()), keys_device.download(),
                         values_device.download()};
}

TEST_CASE("launch_decode_attention_bf16 appends k, v and attends over positions 0 .. p",
          "[kernels][attention][bf16]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  // GPT-2 small's heads at lengths 1, odd and the full cache; D = 128 (two pieces per
  // lane), D = 8 (one lane of eight busy) and odd B.
  for (const AttentionCase c :
       {AttentionCase{1, 12, 768, 101, 0}, AttentionCase{3, 12, 768, 101, 50},
        AttentionCase{32, 12, 768, 101, 100}, AttentionCase{5, 4, 512, 40, 17},
        AttentionCase{7, 3, 24, 33, 32}, AttentionCase{64, 12, 768, 20, 16}}) {
    CAPTURE(c.B, c.H, c.C, c.capacity, c.p);
    const int D = c.C / c.H;
    const std::size_t cache_size = static_cast<std::size_t>(c.B) * c.C * c.capacity;
    const std::vector<float> qkv = test::rounded_to_bfloat16(test::random_qkv(rng, c.B, c.C));
    // Positions before p hold earlier steps' keys and values; p and after hold NaN.
    std::vector<float> keys = test::random_bfloat16(rng, cache_size, -2.0f, 2.0f);
    std::vector<float> values = test::random_bfloat16(rng, cache_size, -1.0f, 1.0f);
    std::vector<std::uint16_t> keys_bits = test::to_bfloat16_bits(keys);
    std::vector<std::uint16_t> values_bits = test::to_bfloat16_bits(values);
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h)
        for (int s = c.p; s < c.capacity; ++s)
          for (int d = 0; d < D; ++d) {
            keys_bits[cache_index(c, b, h, s, d)] = kNanBits;
            values_bits[cache_index(c, b, h, s, d)] = kNanBits;
          }
    const AttentionResult result = run_attention(stream, c, qkv, keys_bits, values_bits, c.p);

    // The reference: the cache with position p appended, q from qkv.
    std::vector<float> q(static_cast<std::size_t>(c.B) * c.C);
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h)
        for (int d = 0; d < D; ++d) {
          const std::size_t column = static_cast<std::size_t>(b) * 3 * c.C + h * D + d;
          q[static_cast<std::size_t>(b) * c.C + h * D + d] = qkv[column];
          keys[cache_index(c, b, h, c.p, d)] = qkv[column + c.C];
          values[cache_index(c, b, h, c.p, d)] = qkv[column + 2 * c.C];
          // The appended entry, bit for bit; the positions after p untouched.
          CHECK(result.keys[cache_index(c, b, h, c.p, d)] ==
                float_to_bfloat16_bits(qkv[column + c.C]));
          CHECK(result.values[cache_index(c, b, h, c.p, d)] ==
                float_to_bfloat16_bits(qkv[column + 2 * c.C]));
          if (c.p + 1 < c.capacity)
            CHECK(result.keys[cache_index(c, b, h, c.p + 1, d)] == kNanBits);
        }
    std::vector<float> expected(q.size());
    reference::decode_attention(q.data(), keys.data(), values.data(), expected.data(), c.B, c.p + 1,
                                c.capacity, c.H, c.C);
    expected = test::rounded_to_bfloat16(expected);
    CHECK(test::beyond_one_bfloat16_step(result.out, expected,
                                         kSlack * test::max_magnitude(expected)) == 0);

    const AttentionResult again = run_attention(stream, c, qkv, keys_bits, values_bits, c.p);
    CHECK(std::memcmp(result.out.data(), again.out.data(), result.out.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("launch_decode_attention_bf16: a cursor outside the cache gives NaN, no write",
          "[kernels][attention][bf16]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const AttentionCase c{2, 12, 768, 16, 0};
  const std::size_t cache_size = static_cast<std::size_t>(c.B) * c.C * c.capacity;
  const std::vector<float> qkv = test::rounded_to_bfloat16(test::random_qkv(rng, c.B, c.C));
  const std::vector<std::uint16_t> keys =
      test::to_bfloat16_bits(test::random_bfloat16(rng, cache_size, -1.0f, 1.0f));
  for (const int position : {-1, c.capacity}) {
    CAPTURE(position);
    const AttentionResult result = run_attention(stream, c, qkv, keys, keys, position);
    CHECK(test::all_nan(result.out));
    CHECK(result.keys == keys);
    CHECK(result.values == keys);
  }
}

TEST_CASE("launch_decode_attention_bf16 rejects bad arguments", "[kernels][attention][bf16]") {
  test::DeviceStream stream;
  test::DeviceBfloats buffer(4096);
  __nv_bfloat16* const x = test::as_bfloat16(buffer);
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, 0);
  CHECK_THROWS_AS(launch_decode_attention_bf16(x, x, x, nullptr, 4, x, 1, 2, 16, stream.get()),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_decode_attention_bf16(x, x, x, cursor.get(), 4, x, 1, 3, 16, stream.get()),
                  std::invalid_argument);  // C not divisible by H
  CHECK_THROWS_AS(launch_decode_attention_bf16(x, x, x, cursor.get(), 4, x, 1, 4, 16, stream.get()),
                  std::invalid_argument);  // D = 4, not a multiple of 8
  CHECK_THROWS_AS(
      launch_decode_attention_bf16(x + 1, x, x, cursor.get(), 4, x, 1, 2, 16, stream.get()),
      std::invalid_argument);  // qkv not 16-byte aligned
}

}  // namespace
}  // namespace ladder
