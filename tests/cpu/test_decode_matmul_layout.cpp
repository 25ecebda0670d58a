// tests/cpu/test_decode_matmul_layout.cpp - the decode matmuls' packed weight layout
// (kernels/decode_matmul_layout.hpp): packing and unpacking round-trip, the padding is
// zero, the transposed packing (the LM head's) equals packing the transpose, and a
// product read tile by tile in the kernel's order equals reference::linear.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/decode_matmul_layout.hpp"

namespace {

using ladder::DecodeWeightLayout;
using ladder::kDecodeChunkRows;
using ladder::kDecodeTileColumns;

std::vector<float> random_values(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& value : values) value = distribution(rng);
  return values;
}

struct Shape {
  int K;
  int N;
};
// Exact tiles, one row or column, one past and one short of a tile, GPT-2 small's shapes.
const Shape kShapes[] = {{1, 1},    {32, 64},   {31, 63},    {33, 65},    {100, 97},
                         {64, 100}, {768, 768}, {768, 2304}, {3072, 768}, {7, 300}};

TEST_CASE("decode weight layout: sizes and positions", "[decode_matmul]") {
  const DecodeWeightLayout layout = DecodeWeightLayout::of(100, 97);
  CHECK(layout.column_tiles == 2);
  CHECK(layout.padded_rows == 128);
  CHECK(layout.packed_floats() == std::size_t{2} * 128 * 64);
  CHECK(layout.packed_index(0, 0) == 0);
  CHECK(layout.packed_index(0, 63) == 63);
  CHECK(layout.packed_index(1, 0) == 64);                      // the next row of tile 0
  CHECK(layout.packed_index(0, 64) == std::size_t{128} * 64);  // tile 1 after all of tile 0
  CHECK(layout.packed_index(99, 96) == (std::size_t{128} + 99) * 64 + 32);
  CHECK(DecodeWeightLayout::of(768, 50257).column_tiles == 786);
  CHECK_THROWS_AS(DecodeWeightLayout::of(0, 4), std::invalid_argument);
  CHECK_THROWS_AS(DecodeWeightLayout::of(4, -1), std::invalid_argument);
}

TEST_CASE("decode weight packing round-trips and pads with zeros", "[decode_matmul]") {
  std::mt19937 rng(20261201);
  for (const Shape shape : kShapes) {
    CAPTURE(shape.K, shape.N);
    const std::vector<float> weight =
        random_values(rng, static_cast<std::size_t>(shape.K) * shape.N);
    const std::vector<float> packed = ladder::pack_decode_weight(weight.data(), shape.K, shape.N);
    const DecodeWeightLayout layout = DecodeWeightLayout::of(shape.K, shape.N);
    REQUIRE(packed.size() == layout.packed_floats());
    CHECK(ladder::unpack_decode_weight(packed, shape.K, shape.N) == weight);

    // Every float of the packed weight is either an element of W or a zero of the
    // padding, and each element of W appears once: the padding holds K_padded * 64 T - K N.
    std::size_t nonzero_padding = 0;
    std::vector<bool> is_element(packed.size(), false);
    for (int k = 0; k < shape.K; ++k)
      for (int n = 0; n < shape.N; ++n) is_element[layout.packed_index(k, n)] = true;
    for (std::size_t i = 0; i < packed.size(); ++i)
      if (!is_element[i] && packed[i] != 0.0f) ++nonzero_padding;
    CHECK(nonzero_padding == 0);
    CHECK(static_cast<std::size_t>(std::count(is_element.begin(), is_element.end(), true)) ==
          weight.size());
  }
  CHECK_THROWS_AS(ladder::unpack_decode_weight(std::vector<float>(10), 4, 4),
                  std::invalid_argument);
}

TEST_CASE("the LM head's transposed packing equals packing wte^T", "[decode_matmul]") {
  std::mt19937 rng(7);
  for (const Shape shape : kShapes) {
    CAPTURE(shape.K, shape.N);
    // wte [N, K] (V x C) and its transpose W [K, N] (C x V).
    const std::vector<float> wte = random_values(rng, static_cast<std::size_t>(shape.N) * shape.K);
    std::vector<float> transposed(wte.size());
    for (int n = 0; n < shape.N; ++n)
      for (int k = 0; k < shape.K; ++k)
        transposed[static_cast<std::size_t>(k) * shape.N + n] =
            wte[static_cast<std::size_t>(n) * shape.K + k];
    CHECK(ladder::pack_decode_weight_transposed(wte.data(), shape.N, shape.K) ==
          ladder::pack_decode_weight(transposed.data(), shape.K, shape.N));
  }
}

TEST_CASE("a product read from the packed weight in the kernel's order is reference::linear",
          "[decode_matmul]") {
  std::mt19937 rng(11);
  const int B = 3;
  for (const Shape shape : {Shape{100, 97}, Shape{33, 65}, Shape{768, 130}}) {
    CAPTURE(shape.K, shape.N);
    const std::vector<float> weight =
        random_values(rng, static_cast<std::size_t>(shape.K) * shape.N);
    const std::vector<float> x = random_values(rng, static_cast<std::size_t>(B) * shape.K);
    const std::vector<float> packed = ladder::pack_decode_weight(weight.data(), shape.K, shape.N);
    const DecodeWeightLayout layout = DecodeWeightLayout::of(shape.K, shape.N);

    // Tile by tile, chunk by chunk, each chunk one contiguous run of 32 x 64 floats, as
    // a block of the kernel streams them; x past K counts as zero.
    std::vector<double> sums(static_cast<std::size_t>(B) * layout.column_tiles *
                             kDecodeTileColumns);
    for (int tile = 0; tile < layout.column_tiles; ++tile) {
      for (int k0 = 0; k0 < layout.padded_rows; k0 += kDecodeChunkRows) {
        const float* chunk =
            packed.data() +
            (static_cast<std::size_t>(tile) * layout.padded_rows + k0) * kDecodeTileColumns;
        for (int row = 0; row < kDecodeChunkRows; ++row) {
          const int k = k0 + row;
          for (int b = 0; b < B; ++b) {
            const double x_value = k < shape.K ? x[static_cast<std::size_t>(b) * shape.K + k] : 0.0;
            for (int c = 0; c < kDecodeTileColumns; ++c)
              sums[(static_cast<std::size_t>(b) * layout.column_tiles + tile) * kDecodeTileColumns +
                   c] += x_value * chunk[row * kDecodeTileColumns + c];
          }
        }
      }
    }
    std::vector<float> from_packed(static_cast<std::size_t>(B) * shape.N);
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < shape.N; ++n)
        from_packed[static_cast<std::size_t>(b) * shape.N + n] = static_cast<float>(
            sums[static_cast<std::size_t>(b) * layout.column_tiles * kDecodeTileColumns + n]);

    std::vector<float> expected(from_packed.size());
    ladder::reference::linear(x.data(), weight.data(), nullptr, expected.data(), B, shape.K,
                              shape.N);
    CHECK(ladder::reference::relative_error(from_packed.data(), expected.data(), expected.size()) <=
          1e-12);
  }
}

}  // namespace
