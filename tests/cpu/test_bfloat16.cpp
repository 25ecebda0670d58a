// tests/cpu/test_bfloat16.cpp - bf16 rounding and widening, and bf16 weight packing.
//
// The rounding under test works on bits (common/bfloat16.cpp); the tests check it against
// an independent computation in double arithmetic: scale |x| by the bf16 spacing at x,
// round with std::nearbyint (the default mode: to nearest, ties to even), scale back,
// and call anything at or past 2^128 infinity. Hand-picked edge cases first, then every
// bf16 value's neighbourhood and a million random bit patterns.
// Run: cpu_tests "[bfloat16]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/bfloat16.hpp"

namespace {

float float_from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// The nearest bf16 to a finite x, by arithmetic: bf16 keeps 8 significant bits, so in
// the binade [2^E, 2^(E+1)) its values are 2^(E-7) apart; below 2^-126 (subnormal) they
// are 2^-133 apart, as float's exponent range is bf16's.
double nearest_bfloat16_by_arithmetic(float x) {
  const double magnitude = std::fabs(static_cast<double>(x));
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent-1), 2^exponent)
  const int binade = std::max(exponent - 1, -126);
  const double spacing = std::ldexp(1.0, binade - 7);
  double rounded = std::nearbyint(magnitude / spacing) * spacing;
  if (rounded >= std::ldexp(1.0, 128)) rounded = std::numeric_limits<double>::infinity();
  return std::signbit(x) ? -rounded : rounded;
}

// Counts the floats among `inputs` whose rounding disagrees with the arithmetic (NaNs
// excluded: they are checked on their own), keeping the first for the message.
std::size_t disagreements(const std::vector<std::uint32_t>& inputs, std::uint32_t* first) {
  std::size_t count = 0;
  for (std::uint32_t bits : inputs) {
    const float x = float_from_bits(bits);
    if (std::isnan(x)) continue;
    const float rounded = ladder::round_to_bfloat16(x);
    const double expected =
        std::isinf(x) ? static_cast<double>(x) : nearest_bfloat16_by_arithmetic(x);
    const bool same =
        static_cast<double>(rounded) == expected && std::signbit(rounded) == std::signbit(expected);
    if (!same && count++ == 0) *first = bits;
  }
  return count;
}

std::uint16_t round_bits(std::uint32_t float_bits) {
  return ladder::float_to_bfloat16_bits(float_from_bits(float_bits));
}

}  // namespace

TEST_CASE("bf16 rounding: exact values, ties to even, subnormals, overflow", "[bfloat16]") {
  SECTION("values with 8 significant bits are kept exactly, signed zeros included") {
    CHECK(ladder::float_to_bfloat16_bits(1.0f) == 0x3F80);
    CHECK(ladder::float_to_bfloat16_bits(-2.0f) == 0xC000);
    CHECK(ladder::float_to_bfloat16_bits(0.0f) == 0x0000);
    CHECK(ladder::float_to_bfloat16_bits(-0.0f) == 0x8000);
    CHECK(ladder::float_to_bfloat16_bits(-3.140625f) == 0xC049);
  }
  SECTION("halfway between two bf16 values goes to the even one") {
    CHECK(round_bits(0x3F808000) == 0x3F80);  // 1 + 2^-8: between 1 (even) and 1 + 2^-7
    CHECK(round_bits(0x3F818000) == 0x3F82);  // between 0x3F81 (odd) and 0x3F82 (even)
    CHECK(round_bits(0xBF818000) == 0xBF82);  // the same, negative
    CHECK(round_bits(0x3F808001) == 0x3F81);  // just above halfway: up
    CHECK(round_bits(0x3F817FFF) == 0x3F81);  // just below halfway: down
    CHECK(round_bits(0x3F80FFFF) == 0x3F81);
    CHECK(round_bits(0x3FFF8000) == 0x4000);  // a tie whose carry moves to the next binade
  }
  SECTION("subnormals round on bf16's own subnormal grid (spacing 2^-133)") {
    CHECK(round_bits(0x00000001) == 0x0000);  // the smallest float subnormal: to zero
    CHECK(round_bits(0x00008000) == 0x0000);  // halfway between 0 and 2^-133: even is 0
    CHECK(round_bits(0x00008001) == 0x0001);
    CHECK(round_bits(0x00018000) == 0x0002);  // halfway between 0x0001 and 0x0002
    CHECK(round_bits(0x80018000) == 0x8002);
    CHECK(round_bits(0x007FFFFF) == 0x0080);  // the largest subnormal rounds up to 2^-126
    CHECK(ladder::bfloat16_bits_to_float(0x0001) == std::ldexp(1.0f, -133));
  }
  SECTION("past the largest finite bf16 by half a step or more is infinity") {
    const float largest = std::ldexp(255.0f / 128.0f, 127);  // 0x7F7F
    CHECK(ladder::float_to_bfloat16_bits(largest) == 0x7F7F);
    CHECK(ladder::bfloat16_bits_to_float(0x7F7F) == largest);
    CHECK(round_bits(0x7F7F7FFF) == 0x7F7F);  // below halfway: stays finite
    CHECK(round_bits(0x7F7F8000) == 0x7F80);  // halfway, odd 0x7F7F: up to infinity
    CHECK(ladder::float_to_bfloat16_bits(std::numeric_limits<float>::max()) == 0x7F80);
    CHECK(ladder::float_to_bfloat16_bits(-std::numeric_limits<float>::max()) == 0xFF80);
    CHECK(ladder::float_to_bfloat16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
    CHECK(ladder::float_to_bfloat16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  }
  SECTION("a NaN stays a NaN, even when its payload sits in the dropped bits") {
    for (std::uint32_t nan_bits :
         {0x7FC00000u, 0x7F800001u, 0x7F80FFFFu, 0xFFC00000u, 0xFF800001u, 0x7FFFFFFFu}) {
      INFO("float bits " << std::hex << nan_bits);
      const std::uint16_t bits = round_bits(nan_bits);
      CHECK(std::isnan(ladder::bfloat16_bits_to_float(bits)));
      CHECK((bits & 0x8000u) == ((nan_bits >> 16) & 0x8000u));  // the sign is kept
    }
    CHECK(std::isnan(ladder::round_to_bfloat16(std::numeric_limits<float>::quiet_NaN())));
  }
}

TEST_CASE("bf16 rounding agrees with arithmetic in double near every bf16 value and at random",
          "[bfloat16]") {
  // Each finite bf16 value, the floats just around it, and the halfway point to the next
  // one with its two float neighbours: every tie and near-tie of the whole range.
  std::vector<std::uint32_t> around_every_value;
  for (std::uint32_t high = 0; high <= 0xFFFF; ++high) {
    const std::uint32_t value = high << 16;
    for (std::uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      around_every_value.push_back(value | low);
    }
    if (high > 0) around_every_value.push_back(value - 1);
  }
  std::uint32_t first = 0;
  const std::size_t near_values = disagreements(around_every_value, &first);
  INFO("first disagreement at float bits " << std::hex << first);
  CHECK(near_values == 0);

  std::mt19937 generator(2024);
  std::vector<std::uint32_t> random_bits(1u << 20);
  for (std::uint32_t& bits : random_bits) bits = static_cast<std::uint32_t>(generator());
  const std::size_t at_random = disagreements(random_bits, &first);
  INFO("first disagreement at float bits " << std::hex << first);
  CHECK(at_random == 0);
}

TEST_CASE("bf16 widening is exact and rounding a widened value gives its bits back", "[bfloat16]") {
  std::size_t mismatches = 0;
  for (std::uint32_t high = 0; high <= 0xFFFF; ++high) {
    const std::uint16_t bits = static_cast<std::uint16_t>(high);
    const float widened = ladder::bfloat16_bits_to_float(bits);
    if (bits_of(widened) != high << 16) ++mismatches;
    if (!std::isnan(widened) && ladder::float_to_bfloat16_bits(widened) != bits) ++mismatches;
  }
  CHECK(mismatches == 0);

  std::vector<float> values = {0.1f, -1e-3f, 3e38f, 1e-40f, 7.0f};
  const std::vector<float> original = values;
  ladder::round_to_bfloat16(values.data(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    CHECK(bits_of(values[i]) == bits_of(ladder::round_to_bfloat16(original[i])));
  }
  CHECK(values[0] == 0.10009765625f);  // 0.1 to 8 significant bits
}

TEST_CASE("bf16 weight packing: each layout places (k, n) where it says, and unpacks back",
          "[bfloat16]") {
  const int K = 13, N = 3;  // K is not a multiple of the k_tiled tile (8)
  std::vector<float> weights(static_cast<std::size_t>(K) * N);
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) weights[k * N + n] = 1.0f + 0.001f * static_cast<float>(k * N + n);
  }
  std::vector<float> rounded = weights;
  ladder::round_to_bfloat16(rounded.data(), rounded.size());
  struct Case {
    ladder::BfloatLayout layout;
    std::size_t size;
  };
  for (const Case& layout_case :
       {Case{ladder::BfloatLayout::k_major, 39u}, Case{ladder::BfloatLayout::n_major, 39u},
        Case{ladder::BfloatLayout::k_tiled, 16u * 3u}}) {
    const ladder::BfloatLayout layout = layout_case.layout;
    INFO("layout " << static_cast<int>(layout));
    REQUIRE(ladder::packed_bfloat16_size(K, N, layout) == layout_case.size);
    const std::vector<std::uint16_t> packed = ladder::pack_bfloat16_weights(weights, K, N, layout);
    REQUIRE(packed.size() == layout_case.size);
    std::vector<bool> written(packed.size(), false);
    for (int k = 0; k < K; ++k) {
      for (int n = 0; n < N; ++n) {
        std::size_t at = 0;
        switch (layout) {
          case ladder::BfloatLayout::k_major:
            at = static_cast<std::size_t>(k) * N + n;
            break;
          case ladder::BfloatLayout::n_major:
            at = static_cast<std::size_t>(n) * K + k;
            break;
          case ladder::BfloatLayout::k_tiled:
            at = (static_cast<std::size_t>(k / 8) * N + n) * 8 + k % 8;
            break;
        }
        INFO("k " << k << ", n " << n);
        CHECK(packed[at] == ladder::float_to_bfloat16_bits(weights[k * N + n]));
        written[at] = true;
      }
    }
    for (std::size_t i = 0; i < packed.size(); ++i) {
      if (!written[i]) CHECK(packed[i] == 0);  // k_tiled's padding: +0
    }
    CHECK(ladder::unpack_bfloat16_weights(packed, K, N, layout) == rounded);
  }
  // One tile of k_tiled, by hand: K = 8, N = 2 puts column 0's 8 inputs, then column 1's.
  const std::vector<float> small = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  std::vector<float> tile_order;
  for (std::uint16_t bits :
       ladder::pack_bfloat16_weights(small, 8, 2, ladder::BfloatLayout::k_tiled))
    tile_order.push_back(ladder::bfloat16_bits_to_float(bits));
  CHECK(tile_order == std::vector<float>{0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15});

  CHECK_THROWS_AS(ladder::pack_bfloat16_weights(weights, K, N + 1, ladder::BfloatLayout::k_major),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      ladder::pack_bfloat16_weights(std::vector<float>{}, 0, 0, ladder::BfloatLayout::n_major),
      std::invalid_argument);
  CHECK(ladder::pack_bfloat16_weights(weights.data(), K, N, ladder::BfloatLayout::k_tiled) ==
        ladder::pack_bfloat16_weights(weights, K, N, ladder::BfloatLayout::k_tiled));
  CHECK_THROWS_AS(
      ladder::pack_bfloat16_weights(weights.data(), K, 0, ladder::BfloatLayout::k_major),
      std::invalid_argument);
  CHECK_THROWS_AS(ladder::unpack_bfloat16_weights(std::vector<std::uint16_t>(39), K, N,
                                                  ladder::BfloatLayout::k_tiled),
                  std::invalid_argument);
  CHECK_THROWS_AS(ladder::packed_bfloat16_size(0, 4, ladder::BfloatLayout::k_tiled),
                  std::invalid_argument);
}

TEST_CASE("bf16 transposed packing packs W = M^T exactly as packing W itself", "[bfloat16]") {
  // M [N, K] as the tied LM head's wte [V, C]; K = 13 is not a multiple of 8.
  const int N = 5, K = 13;
  std::vector<float> matrix(static_cast<std::size_t>(N) * K);
  for (std::size_t i = 0; i < matrix.size(); ++i)
    matrix[i] = 0.5f + 0.0137f * static_cast<float>(i);
  std::vector<float> transposed(matrix.size());
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      transposed[static_cast<std::size_t>(k) * N + n] = matrix[static_cast<std::size_t>(n) * K + k];
  for (const ladder::BfloatLayout layout :
       {ladder::BfloatLayout::k_major, ladder::BfloatLayout::n_major,
        ladder::BfloatLayout::k_tiled}) {
    INFO("layout " << static_cast<int>(layout));
    CHECK(ladder::pack_bfloat16_weights_transposed(matrix.data(), N, K, layout) ==
          ladder::pack_bfloat16_weights(transposed, K, N, layout));
  }
  CHECK_THROWS_AS(
      ladder::pack_bfloat16_weights_transposed(matrix.data(), 0, K, ladder::BfloatLayout::k_tiled),
      std::invalid_argument);
}
