// common/bfloat16.cpp - bf16 rounding by integer arithmetic on the float's bits, and
// weight packing.
#include "common/bfloat16.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace ladder {

namespace {

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_of(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

void require_dimensions(int K, int N, const char* what) {
  if (K < 1 || N < 1) {
    throw std::invalid_argument(std::string(what) + ": a [" + std::to_string(K) + ", " +
                                std::to_string(N) + "] matrix; pass K, N >= 1");
  }
}

void require_size(std::size_t size, std::size_t expected, int K, int N, const char* what) {
  if (size != expected) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(size) +
                                " values for a [" + std::to_string(K) + ", " + std::to_string(N) +
                                "] matrix that takes " + std::to_string(expected) +
                                "; pass the whole matrix");
  }
}

/// Where element (k, n) of a [K, N] matrix sits in `layout`.
std::size_t packed_index(int k, int n, int K, int N, BfloatLayout layout) {
  const std::size_t row = static_cast<std::size_t>(k), column = static_cast<std::size_t>(n);
  switch (layout) {
    case BfloatLayout::k_major:
      return row * static_cast<std::size_t>(N) + column;
    case BfloatLayout::n_major:
      return column * static_cast<std::size_t>(K) + row;
    case BfloatLayout::k_tiled:
      break;
  }
  const std::size_t tile = row / kBfloatTileK, within = row % kBfloatTileK;
  return (tile * static_cast<std::size_t>(N) + column) * kBfloatTileK + within;
}

}  // namespace

std::uint16_t float_to_bfloat16_bits(float value) {
  const std::uint32_t bits = bits_of(value);
  const bool is_nan = (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0;
  // Dropping the low half could leave a zero mantissa (an infinity): set the quiet bit.
  if (is_nan) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7FFF plus the last kept bit carries into the kept half exactly when the
  // dropped half is above one half, or equal to it with an odd kept half: round to
  // nearest, ties to even. A carry out of the mantissa bumps the exponent, which is
  // right for every finite value and turns the largest ones into infinity. No overflow
  // of 32 bits: the largest finite magnitude plus 0x8000 stays below 0x80000000.
  const std::uint32_t last_kept_bit = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7FFFu + last_kept_bit) >> 16);
}

float bfloat16_bits_to_float(std::uint16_t bits) { return float_of(std::uint32_t{bits} << 16); }

float round_to_bfloat16(float value) {
  return bfloat16_bits_to_float(float_to_bfloat16_bits(value));
}

void round_to_bfloat16(float* values, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) values[i] = round_to_bfloat16(values[i]);
}

std::size_t packed_bfloat16_size(int K, int N, BfloatLayout layout) {
  require_dimensions(K, N, "packed_bfloat16_size");
  const std::size_t rows =
      layout == BfloatLayout::k_tiled
          ? (static_cast<std::size_t>(K) + kBfloatTileK - 1) / kBfloatTileK * kBfloatTileK
          : static_cast<std::size_t>(K);
  return rows * static_cast<std::size_t>(N);
}

std::vector<std::uint16_t> pack_bfloat16_weights(const std::vector<float>& weights, int K, int N,
                                                 BfloatLayout layout) {
  require_dimensions(K, N, "pack_bfloat16_weights");
  require_size(weights.size(), static_cast<std::size_t>(K) * static_cast<std::size_t>(N), K, N,
               "pack_bfloat16_weights");
  return pack_bfloat16_weights(weights.data(), K, N, layout);
}

namespace {

/// W [K, N] read from `weights` in `source` layout (k_major: W itself; n_major: its
/// transpose [N, K]), rounded into `layout`.
std::vector<std::uint16_t> pack_from(const float* weights, int K, int N, BfloatLayout source,
                                     BfloatLayout layout, const char* caller) {
  require_dimensions(K, N, caller);
  std::vector<std::uint16_t> packed(packed_bfloat16_size(K, N, layout), 0);
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) {
      packed[packed_index(k, n, K, N, layout)] =
          float_to_bfloat16_bits(weights[packed_index(k, n, K, N, source)]);
    }
  }
  return packed;
}

}  // namespace

std::vector<std::uint16_t> pack_bfloat16_weights(const float* weights, int K, int N,
                                                 BfloatLayout layout) {
  return pack_from(weights, K, N, BfloatLayout::k_major, layout, "pack_bfloat16_weights");
}

std::vector<std::uint16_t> pack_bfloat16_weights_transposed(const float* matrix, int N, int K,
                                                            BfloatLayout layout) {
  return pack_from(matrix, K, N, BfloatLayout::n_major, layout, "pack_bfloat16_weights_transposed");
}

std::vector<float> unpack_bfloat16_weights(const std::vector<std::uint16_t>& packed, int K, int N,
                                           BfloatLayout layout) {
  require_dimensions(K, N, "unpack_bfloat16_weights");
  require_size(packed.size(), packed_bfloat16_size(K, N, layout), K, N, "unpack_bfloat16_weights");
  std::vector<float> weights(static_cast<std::size_t>(K) * static_cast<std::size_t>(N));
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) {
      weights[packed_index(k, n, K, N, BfloatLayout::k_major)] =
          bfloat16_bits_to_float(packed[packed_index(k, n, K, N, layout)]);
    }
  }
  return weights;
}

}  // namespace ladder
