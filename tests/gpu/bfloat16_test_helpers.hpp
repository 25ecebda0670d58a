// tests/gpu/bfloat16_test_helpers.hpp - bf16 on both sides of a GPU test: random
// bf16-valued inputs, device arrays of bf16 bit patterns, and the comparison every bf16
// kernel test uses.
//
// Why "within one bf16 step" and not equality: a kernel stores bf16(y) with y summed in
// fp32, the reference rounds y summed in fp64 (common/reference.hpp). Where the exact
// y lies close to the midpoint between two bf16 values, the two sums can fall on either
// side and the stored values differ by one step (2^-8 relative at most); anywhere else
// they are equal. Near zero a step is tiny while the fp32 sum's own error is not (it
// scales with the magnitudes summed, not with y), so an absolute slack, far below one
// step of the output's largest values, covers that.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "common/bfloat16.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder::test {

/// A device array of bf16 (bit patterns on the host; poison() makes every value 0xFFFF,
/// a NaN).
using DeviceBfloats = DeviceArray<std::uint16_t>;

inline __nv_bfloat16* as_bfloat16(const DeviceBfloats& array) {
  return reinterpret_cast<__nv_bfloat16*>(array.get());
}

/// n bf16 values (held as floats) drawn uniformly from [low, high) and rounded.
inline std::vector<float> random_bfloat16(std::mt19937& rng, std::size_t n, float low, float high) {
  std::vector<float> values = random_uniform(rng, n, low, high);
  round_to_bfloat16(values.data(), values.size());
  return values;
}

inline std::vector<std::uint16_t> to_bfloat16_bits(const std::vector<float>& values) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bfloat16_bits(values[i]);
  return bits;
}

inline std::vector<float> from_bfloat16_bits(const std::vector<std::uint16_t>& bits) {
  std::vector<float> values(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) values[i] = bfloat16_bits_to_float(bits[i]);
  return values;
}

/// `values` rounded to bf16: what a reference result becomes where a kernel stores it.
inline std::vector<float> rounded_to_bfloat16(std::vector<float> values) {
  round_to_bfloat16(values.data(), values.size());
  return values;
}

/// The distance between neighbouring bf16 values at magnitude |value| (2^(e - 7) in the
/// binade [2^e, 2^(e+1))).
inline double bfloat16_step(double value) {
  int exponent = 0;
  std::frexp(std::fabs(value), &exponent);  // |value| = m 2^exponent, m in [0.5, 1)
  return std::ldexp(1.0, std::max(exponent - 8, -133));
}

/// Elements where actual and expected (both bf16 values) differ by more than one bf16
/// step at the larger of the two plus `slack` - or either is not finite, or the sizes
/// differ (then every element counts). 0 is a pass.
inline std::size_t beyond_one_bfloat16_step(const std::vector<float>& actual,
                                            const std::vector<float>& expected, double slack) {
  if (actual.size() != expected.size() || actual.empty())
    return std::max<std::size_t>(1, expected.size());
  std::size_t beyond = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (!std::isfinite(a) || !std::isfinite(e) ||
        std::fabs(a - e) > bfloat16_step(std::max(std::fabs(a), std::fabs(e))) + slack)
      ++beyond;
  }
  return beyond;
}

/// max |value| of a vector (0 for an empty one).
inline double max_magnitude(const std::vector<float>& values) {
  double largest = 0.0;
  for (const float value : values)
    largest = std::max(largest, std::fabs(static_cast<double>(value)));
  return largest;
}

}  // namespace ladder::test
