// common/splitmix64.hpp - SplitMix64 (Steele, Lea and Flood, 2014): a tiny, fully
// specified 64-bit mixer, so the numbers it gives are the same on every machine and
// standard library (std::uniform_int_distribution and std::normal_distribution are not).
// The random weights hash a counter with it; the random prompts run it as a generator.
#pragma once

#include <cstdint>

namespace ladder {

/// SplitMix64's output for counter value `x`: x is advanced by the golden-ratio
/// increment, then mixed. A stateless hash: equal inputs give equal outputs.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The next number of the SplitMix64 generator whose state is `state`, which advances.
inline std::uint64_t splitmix64_next(std::uint64_t& state) {
  const std::uint64_t value = splitmix64(state);
  state += 0x9E3779B97F4A7C15ull;
  return value;
}

}  // namespace ladder
