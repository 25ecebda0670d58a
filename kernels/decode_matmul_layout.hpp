// kernels/decode_matmul_layout.hpp - the packed weight layout the decode matmuls stream,
// and the host functions that pack a weight into it and unpack it again.
//
// Host code only (no CUDA): the packing runs once, when the model is loaded, and the CPU
// tests check it without a GPU.
//
// A weight W [K, N] (GPT-2's Conv1D layout [in, out], row-major) is cut into column
// tiles of kDecodeTileColumns = 64 columns. Tile t holds columns 64 t .. 64 t + 63 of
// every row k, rows in order, the rows padded with zeros to a multiple of
// kDecodeChunkRows = 32 (K_padded rows) and the last tile's missing columns zero:
//
//   W [K, N] row-major                      packed: tile 0, then tile 1, ...
//   +--------+--------+--------+           +--------+   tile 0: rows 0 .. K_padded-1,
//   | tile 0 | tile 1 | tile 2 |  k = 0    | t0 k=0 |   64 floats (256 bytes) each,
//   |  64    |  64    |  (N%64 |  k = 1    | t0 k=1 |   one after the other
//   | cols   | cols   |  + 0s) |  ...      |  ...   |
//   +--------+--------+--------+           | t1 k=0 |   element (k, n) of W sits at
//                                          |  ...   |   ((n / 64) K_padded + k) 64 + n % 64
//
// A block of the kernel owns one tile and a range of its rows, so what it reads is one
// contiguous run of memory, 32 rows (8 KiB) per pipeline stage; no block reads a byte
// another block reads. Zero padding lets the kernel load whole 16-byte pieces without
// bounds checks (the padded columns are never stored, the padded rows meet zeros in x).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace ladder {

/// Columns of one packed tile: 64 floats, 256 bytes per row.
constexpr int kDecodeTileColumns = 64;
/// Rows of W moved per pipeline stage; K is padded to a multiple of this.
constexpr int kDecodeChunkRows = 32;

/// How a [K, N] weight is laid out once packed.
struct DecodeWeightLayout {
  int K = 0;
  int N = 0;
  int column_tiles = 0;  ///< ceil(N / 64)
  int padded_rows = 0;   ///< K rounded up to a multiple of 32

  static DecodeWeightLayout of(int K, int N) {
    if (K <= 0 || N <= 0)
      throw std::invalid_argument("DecodeWeightLayout: K and N must be > 0 (got K = " +
                                  std::to_string(K) + ", N = " + std::to_string(N) + ")");
    DecodeWeightLayout layout;
    layout.K = K;
    layout.N = N;
    layout.column_tiles = (N + kDecodeTileColumns - 1) / kDecodeTileColumns;
    layout.padded_rows = (K + kDecodeChunkRows - 1) / kDecodeChunkRows * kDecodeChunkRows;
    return layout;
  }

  /// Floats of the packed weight (padding included).
  std::size_t packed_floats() const {
    return static_cast<std::size_t>(column_tiles) * padded_rows * kDecodeTileColumns;
  }

  /// Where element (k, n) of W lives in the packed weight.
  std::size_t packed_index(int k, int n) const {
    return (static_cast<std::size_t>(n / kDecodeTileColumns) * padded_rows + k) *
               kDecodeTileColumns +
           static_cast<std::size_t>(n % kDecodeTileColumns);
  }
};

/// The packed weight whose element (k, n) is element(k, n), the padding zero.
template <typename Element>
std::vector<float> pack_decode_elements(int K, int N, const Element& element) {
  const DecodeWeightLayout layout = DecodeWeightLayout::of(K, N);
  std::vector<float> packed(layout.packed_floats(), 0.0f);
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) packed[layout.packed_index(k, n)] = element(k, n);
  return packed;
}

/// Packs W [K, N] row-major (a Conv1D weight [in, out]) into the tiled layout above.
inline std::vector<float> pack_decode_weight(const float* weight, int K, int N) {
  return pack_decode_elements(
      K, N, [&](int k, int n) { return weight[static_cast<std::size_t>(k) * N + n]; });
}

/// Packs the transpose of M [N, K] row-major, that is W = M^T [K, N]: the tied LM head,
/// logits = x wte^T, streams wte [V, C] packed this way (K = C, N = V).
inline std::vector<float> pack_decode_weight_transposed(const float* matrix, int N, int K) {
  return pack_decode_elements(
      K, N, [&](int k, int n) { return matrix[static_cast<std::size_t>(n) * K + k]; });
}

/// The inverse of pack_decode_weight: W [K, N] row-major from its packed form (the
/// padding is dropped). Throws std::invalid_argument when `packed` has the wrong size.
inline std::vector<float> unpack_decode_weight(const std::vector<float>& packed, int K, int N) {
  const DecodeWeightLayout layout = DecodeWeightLayout::of(K, N);
  if (packed.size() != layout.packed_floats())
    throw std::invalid_argument("unpack_decode_weight: " + std::to_string(packed.size()) +
                                " floats for a packed [" + std::to_string(K) + ", " +
                                std::to_string(N) + "] weight of " +
                                std::to_string(layout.packed_floats()));
  std::vector<float> weight(static_cast<std::size_t>(K) * N);
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n)
      weight[static_cast<std::size_t>(k) * N + n] = packed[layout.packed_index(k, n)];
  return weight;
}

}  // namespace ladder
