// tests/gpu/test_cache_attention_bf16_per_row.cpp - launch_decode_attention_bf16_per_row
// (kernels/cache_attention_bf16.cuh), the serving slots' bf16 attention: each row appends
// and attends at its own position of its own slot's cache block, against reference::
// decode_attention on the bf16 cache and qkv with the output rounded to bf16 (common/
// reference.hpp, R4 and R5; the comparison of tests/gpu/bfloat16_test_helpers.hpp); an
// idle row (slot or position outside the cache) outputs exactly 0 and writes nothing;
// every row at one position in its own block gives the cursor kernel's bits.
// Run: gpu_tests "[batching]"
#include <catch2/catch.hpp>

#include <algorithm>
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

/// B rows over a cache of S slots.
struct Shape {
  int B;
  int S;
  int H;
  int C;
  int capacity;
  int D() const { return C / H; }
  std::size_t cache_size() const { return static_cast<std::size_t>(S) * C * capacity; }
  /// Index of (slot, h, s, d) in a [S, H, capacity, D] cache.
  std::size_t index(int slot, int h, int s, int d) const {
    return ((static_cast<std::size_t>(slot) * H + h) * capacity + s) * D() + d;
  }
  bool active(int slot, int position) const {
    return slot >= 0 && slot < S && position >= 0 && position < capacity;
  }
};

struct PerRowResult {
  std::vector<float> out;
  std::vector<std::uint16_t> keys;
  std::vector<std::uint16_t> values;
};

PerRowResult run_per_row(const test::DeviceStream& stream, const Shape& shape,
                         const std::vector<float>& qkv, const std::vector<std::uint16_t>& keys,
                         const std::vector<std::uint16_t>& values,
                         const std::vector<std::int32_t>& slots,
                         const std::vector<std::int32_t>& positions) {
  const test::DeviceBfloats qkv_device(test::to_bfloat16_bits(qkv));
  test::DeviceBfloats keys_device(keys);
  test::DeviceBfloats values_device(values);
  const test::DeviceArray<std::int32_t> slots_device(slots);
  const test::DeviceArray<std::int32_t> positions_device(positions);
  test::DeviceBfloats out(static_cast<std::size_t>(shape.B) * shape.C);
  out.poison();
  launch_decode_attention_bf16_per_row(
      test::as_bfloat16(qkv_device), test::as_bfloat16(keys_device),
      test::as_bfloat16(values_device), slots_device.get(), positions_device.get(), shape.S,
      shape.capacity, test::as_bfloat16(out), shape.B, shape.H, shape.C, stream.get());
  stream.synchronize();
  return PerRowResult{test::from_bfloat16_bits(out.download()), keys_device.download(),
                      values_device.download()};
}

TEST_CASE(
    "launch_decode_attention_bf16_per_row: each row appends and attends at its own slot and "
    "position",
    "[kernels][attention][bf16][batching]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  // GPT-2 small's heads (D = 64), D = 128 (two pieces per lane) and D = 8 (one lane of
  // eight busy); 1, 5, 7 and 33 rows over more slots than rows; capacities under one
  // round of 16 positions, not a multiple of 16, and GPT-2's full context.
  for (const Shape shape : {Shape{1, 2, 12, 768, 7}, Shape{5, 6, 4, 512, 300},
                            Shape{33, 40, 3, 24, 129}, Shape{7, 9, 12, 768, 1024}}) {
    CAPTURE(shape.B, shape.S, shape.H, shape.C, shape.capacity);
    const int D = shape.D();
    const std::vector<float> qkv =
        test::rounded_to_bfloat16(test::random_qkv(rng, shape.B, shape.C));
    // Rows in scrambled slots (distinct: the last slots shuffled to the front); every
    // length from 1 to the capacity can sit beside any other; some rows idle (position -1
    // and one past the end, slot -1 and one past the last), the first row at the last
    // position.
    std::vector<std::int32_t> slots(static_cast<std::size_t>(shape.B));
    for (int b = 0; b < shape.B; ++b) slots[b] = (shape.S - 1 - b + shape.S) % shape.S;
    std::vector<std::int32_t> positions =
        test::random_ints(rng, static_cast<std::size_t>(shape.B), -1, shape.capacity - 1);
    positions[0] = shape.capacity - 1;
    if (shape.B > 2) positions[2] = shape.capacity;
    if (shape.B > 3) positions[3] = -1;
    if (shape.B > 4) slots[4] = -1;
    if (shape.B > 5) slots[5] = shape.S;
    if (shape.B > 5) positions[4] = positions[5] = 0;

    // Before the step each active row's slot holds NaN from its own p onwards: reading
    // its cache at p (instead of this step's k, v) or past p poisons its output. Slots
    // of no active row are random throughout and must stay as they are.
    std::vector<float> keys = test::random_bfloat16(rng, shape.cache_size(), -2.0f, 2.0f);
    std::vector<float> values = test::random_bfloat16(rng, shape.cache_size(), -1.0f, 1.0f);
    std::vector<std::uint16_t> keys_bits = test::to_bfloat16_bits(keys);
    std::vector<std::uint16_t> values_bits = test::to_bfloat16_bits(values);
    for (int b = 0; b < shape.B; ++b) {
      if (!shape.active(slots[b], positions[b])) continue;
      for (int h = 0; h < shape.H; ++h)
        for (int s = positions[b]; s < shape.capacity; ++s)
          for (int d = 0; d < D; ++d) {
            keys_bits[shape.index(slots[b], h, s, d)] = kNanBits;
            values_bits[shape.index(slots[b], h, s, d)] = kNanBits;
          }
    }
    const PerRowResult result =
        run_per_row(stream, shape, qkv, keys_bits, values_bits, slots, positions);

    // The cache after the step: each active row's k, v at its own position of its own
    // slot, bit for bit the bf16 of qkv; nothing else touched.
    std::vector<std::uint16_t> keys_after = keys_bits;
    std::vector<std::uint16_t> values_after = values_bits;
    // The reference, row by row over its slot's block: q from qkv row b, the block with
    // position p_b appended; 0 for an idle row.
    std::vector<float> expected(static_cast<std::size_t>(shape.B) * shape.C, 0.0f);
    const std::size_t block = static_cast<std::size_t>(shape.capacity) * shape.C;
    for (int b = 0; b < shape.B; ++b) {
      const int slot = slots[b];
      const int p = positions[b];
      if (!shape.active(slot, p)) continue;
      std::vector<float> q(static_cast<std::size_t>(shape.C));
      for (int h = 0; h < shape.H; ++h)
        for (int d = 0; d < D; ++d) {
          const std::size_t column = static_cast<std::size_t>(b) * 3 * shape.C + h * D + d;
          q[static_cast<std::size_t>(h) * D + d] = qkv[column];
          keys[shape.index(slot, h, p, d)] = qkv[column + shape.C];
          values[shape.index(slot, h, p, d)] = qkv[column + 2 * shape.C];
          keys_after[shape.index(slot, h, p, d)] = float_to_bfloat16_bits(qkv[column + shape.C]);
          values_after[shape.index(slot, h, p, d)] =
              float_to_bfloat16_bits(qkv[column + 2 * shape.C]);
        }
      reference::decode_attention(q.data(), keys.data() + slot * block,
                                  values.data() + slot * block,
                                  expected.data() + static_cast<std::size_t>(b) * shape.C, 1, p + 1,
                                  shape.capacity, shape.H, shape.C);
    }
    expected = test::rounded_to_bfloat16(expected);
    CHECK(result.keys == keys_after);
    CHECK(result.values == values_after);
    CHECK(test::beyond_one_bfloat16_step(result.out, expected,
                                         kSlack * test::max_magnitude(expected)) == 0);
    // Idle rows: exactly +0 in every column (the poison overwritten, no NaN).
    for (int b = 0; b < shape.B; ++b) {
      if (shape.active(slots[b], positions[b])) continue;
      CAPTURE(b, slots[b], positions[b]);
      for (int column = 0; column < shape.C; ++column) {
        const float value = result.out[static_cast<std::size_t>(b) * shape.C + column];
        std::uint32_t bits = 0;
        std::memcpy(&bits, &value, sizeof(bits));
        REQUIRE(bits == 0u);
      }
    }

    // Again: bit for bit the same output.
    const PerRowResult again =
        run_per_row(stream, shape, qkv, keys_bits, values_bits, slots, positions);
    CHECK(std::memcmp(result.out.data(), again.out.data(), result.out.size() * sizeof(float)) == 0);
  }
}

TEST_CASE(
    "launch_decode_attention_bf16_per_row with every row at one position is the cursor "
    "kernel",
    "[kernels][attention][bf16][batching]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const Shape shape{3, 3, 12, 768, 260};
  const int position = 201;
  const std::vector<float> qkv = test::rounded_to_bfloat16(test::random_qkv(rng, shape.B, shape.C));
  const std::vector<std::uint16_t> keys =
      test::to_bfloat16_bits(test::random_bfloat16(rng, shape.cache_size(), -2.0f, 2.0f));
  const std::vector<std::uint16_t> values =
      test::to_bfloat16_bits(test::random_bfloat16(rng, shape.cache_size(), -1.0f, 1.0f));
  // Row b in slot b: the cursor kernel's layout.
  const PerRowResult per_row = run_per_row(stream, shape, qkv, keys, values, {0, 1, 2},
                                           std::vector<std::int32_t>(shape.B, position));

  const test::DeviceBfloats qkv_device(test::to_bfloat16_bits(qkv));
  test::DeviceBfloats keys_device(keys);
  test::DeviceBfloats values_device(values);
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
  test::DeviceBfloats out(static_cast<std::size_t>(shape.B) * shape.C);
  out.poison();
  launch_decode_attention_bf16(test::as_bfloat16(qkv_device), test::as_bfloat16(keys_device),
                               test::as_bfloat16(values_device), cursor.get(), shape.capacity,
                               test::as_bfloat16(out), shape.B, shape.H, shape.C, stream.get());
  stream.synchronize();
  CHECK(test::to_bfloat16_bits(per_row.out) == out.download());
  CHECK(per_row.keys == keys_device.download());
  CHECK(per_row.values == values_device.download());
}

TEST_CASE("launch_decode_attention_bf16_per_row rejects bad arguments",
          "[kernels][attention][bf16][batching]") {
  test::DeviceStream stream;
  test::DeviceBfloats buffer(4096);
  __nv_bfloat16* const x = test::as_bfloat16(buffer);
  const test::DeviceArray<std::int32_t> ints(std::vector<std::int32_t>(2, 0));
  const std::int32_t* const i = ints.get();
  const auto launch = [&](const __nv_bfloat16* qkv, const std::int32_t* slots,
                          const std::int32_t* positions, int slot_count, int capacity,
                          __nv_bfloat16* out, int H, int C) {
    launch_decode_attention_bf16_per_row(qkv, x, x, slots, positions, slot_count, capacity, out, 1,
                                         H, C, stream.get());
  };
  CHECK_THROWS_AS(launch(nullptr, i, i, 2, 4, x, 2, 16), std::invalid_argument);
  CHECK_THROWS_AS(launch(x, nullptr, i, 2, 4, x, 2, 16), std::invalid_argument);
  CHECK_THROWS_AS(launch(x, i, nullptr, 2, 4, x, 2, 16), std::invalid_argument);
  CHECK_THROWS_AS(launch(x, i, i, 2, 4, nullptr, 2, 16), std::invalid_argument);
  CHECK_THROWS_AS(launch(x, i, i, 0, 4, x, 2, 16), std::invalid_argument);      // no slots
  CHECK_THROWS_AS(launch(x, i, i, 2, 0, x, 2, 16), std::invalid_argument);      // capacity 0
  CHECK_THROWS_AS(launch(x, i, i, 2, 4, x, 3, 16), std::invalid_argument);      // C % H != 0
  CHECK_THROWS_AS(launch(x, i, i, 2, 4, x, 4, 16), std::invalid_argument);      // D = 4
  CHECK_THROWS_AS(launch(x, i, i, 2, 4, x, 1, 256), std::invalid_argument);     // D > 128
  CHECK_THROWS_AS(launch(x + 1, i, i, 2, 4, x, 2, 16), std::invalid_argument);  // unaligned
}

}  // namespace
}  // namespace ladder
