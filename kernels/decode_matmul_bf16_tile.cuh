// kernels/decode_matmul_bf16_tile.cuh - one block's share of a bf16 decode matmul (a split
// of K for one 64-column tile, decode_matmul_bf16.cuh): the weight streamed from global
// memory straight into mma.sync fragments, x read beside it, and the tail every decode
// matmul shares (decode_matmul_common.cuh). The bf16 decode-matmul kernels
// (decode_matmul_bf16.cu) run it once per block; the persistent decode kernel
// (persistent_decode.cu) once per product instruction, so both give the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/bfloat16.hpp"  // kBfloatTileK
#include "kernels/decode_matmul_bf16.cuh"
#include "kernels/decode_matmul_common.cuh"
#include "kernels/device_primitives.cuh"

namespace ladder::decode_bf16 {

using decode_common::chunk_range;
using decode_common::ChunkRange;
using decode_common::kThreads;
using decode_common::kTileColumns;
using decode_common::kTileStride;

constexpr int kChunkRows = kDecodeBf16ChunkRows;                 // 64 inputs per chunk
constexpr int kOctetsPerChunk = kChunkRows / kBfloatTileK;       // 8 pieces of 8 inputs
constexpr int kColumnGroups = kTileColumns / 16;                 // 4: warp % 4
constexpr int kKGroups = decode_common::kWarps / kColumnGroups;  // 2: warp / 4
constexpr int kChunksAhead = 4;  // chunks of W in flight per lane (8 x 16 bytes)

/// The bf16 kernels' arguments: x, W and bias bf16, W packed k_tiled (padded_rows: K
/// rounded up to 8); Out is __nv_bfloat16 for the products, float for the LM head.
template <typename Out>
using DecodeMatmulBf16Arguments = decode_common::DecodeMatmulArguments<__nv_bfloat16, Out>;

/// d += a b for one m16n8k16 tile: a 16 x 16 bf16 (row), b 16 x 8 bf16 (col), d fp32.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// The four 32-bit words (bf16 pairs) of a 16-byte piece, by constant index.
__device__ __forceinline__ std::uint32_t word(const uint4& piece, int index) {
  return index == 0 ? piece.x : index == 1 ? piece.y : index == 2 ? piece.z : piece.w;
}

/// 8 bf16 of x row `row` from input k (zeros past B or K). kXVector: one 16-byte load
/// (K % 8 == 0, so a piece is all inside K or all outside); else 8 guarded 2-byte loads.
template <bool kXVector, typename Out>
__device__ __forceinline__ uint4 load_x(const DecodeMatmulBf16Arguments<Out>& a, int row, int k) {
  if (row >= a.B) return make_uint4(0, 0, 0, 0);
  const __nv_bfloat16* source = a.x + static_cast<std::size_t>(row) * a.K;
  if constexpr (kXVector) {
    if (k >= a.K) return make_uint4(0, 0, 0, 0);
    // Not through the read-only path (__ldg), which is coherent only for data no one
    // writes while the kernel runs: x is written by the kernel before, which under a
    // programmatic launch may still be running when this block starts, and in the
    // persistent kernel by other blocks of the same grid. Cached in L2 only (ld.global.cg):
    // every block reads its own chunks of x once.
    return __ldcg(reinterpret_cast<const uint4*>(source + k));
  } else {
    std::uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::uint32_t low = k + 2 * i < a.K ? __bfloat16_as_ushort(source[k + 2 * i]) : 0u;
      const std::uint32_t high =
          k + 2 * i + 1 < a.K ? __bfloat16_as_ushort(source[k + 2 * i + 1]) : 0u;
      words[i] = low | (high << 16);
    }
    return make_uint4(words[0], words[1], words[2], words[3]);
  }
}

/// Where one lane's fragments sit in a 64-column tile (decode_matmul_bf16.cuh): lane 4 g + u
/// of warp w reads W columns 16 (w % 4) + 8 n8 + g (n8 = 0, 1) and, of each chunk of 64
/// inputs, the octet 4 (w / 4) + u.
struct TileLane {
  int g;
  int u;
  int column_group;  ///< w % 4
  int k_group;       ///< w / 4
  int octet;         ///< of each chunk: inputs 8 octet .. 8 octet + 7
  int columns[2];    ///< one per n8 tile
  bool column_inside[2];
};

template <typename Out>
__device__ __forceinline__ TileLane tile_lane(const DecodeMatmulBf16Arguments<Out>& a, int tile) {
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  TileLane place;
  place.g = lane / 4;
  place.u = lane % 4;
  place.column_group = warp % kColumnGroups;
  place.k_group = warp / kColumnGroups;
  place.octet = 4 * place.k_group + place.u;
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8) {
    place.columns[n8] = tile * kTileColumns + 16 * place.column_group + 8 * n8 + place.g;
    place.column_inside[n8] = place.columns[n8] < a.N;
  }
  return place;
}

/// sums += x W for one chunk: the lane's 8 inputs from k of x's rows, times its two pieces
/// of W (8 inputs of one column each), on the tensor cores.
template <int kRows, bool kXVector, typename Out>
__device__ __forceinline__ void multiply_chunk(const DecodeMatmulBf16Arguments<Out>& a,
                                               const TileLane& place, int k,
                                               const uint4 (&pieces)[2],
                                               float (&sums)[kRows / 16][2][4]) {
#pragma unroll
  for (int m16 = 0; m16 < kRows / 16; ++m16) {
    const uint4 upper = load_x<kXVector>(a, 16 * m16 + place.g, k);
    const uint4 lower = load_x<kXVector>(a, 16 * m16 + place.g + 8, k);
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      const std::uint32_t a_fragment[4] = {word(upper, 2 * step), word(lower, 2 * step),
                                           word(upper, 2 * step + 1), word(lower, 2 * step + 1)};
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8) {
        const std::uint32_t b_fragment[2] = {word(pieces[n8], 2 * step),
                                             word(pieces[n8], 2 * step + 1)};
        mma_bf16(sums[m16][n8], a_fragment, b_fragment);
      }
    }
  }
}

// Math:   y = x W over this block's chunks of K, for the rows of x below B and the 64
//         columns of tile `tile`, on the tensor cores (bf16 in, fp32 sums); then
//         the tail: k-groups, splits, epilogue, one rounding to Out.
// Shapes: see DecodeMatmulBf16Arguments; kRows in {16, 32, 64}, kRows >= B.
// Grid:   (S, T) blocks of 256 threads; warp w: columns 16 (w % 4) .. + 15, inputs
//         32 (w / 4) .. + 31 of each chunk; lane 4 g + u: W column 8 n8 + g and x rows
//         g, g + 8 of each m16 tile, inputs 8 u .. 8 u + 7 (decode_matmul_bf16.cuh).
//
// The body of one block (split, tile), shared with the persistent decode kernel
// (persistent_decode.cu): `shared` holds kKGroups x kRows x kTileStride floats (16-byte
// aligned); `wait_for_inputs()` is called once the block's first weight chunks are in
// flight and before x, the residual stream or the workspace is touched (a kernel
// boundary's wait, or the persistent kernel's wait on counters). Every thread calls it.
template <int kRows, bool kXVector, int kChunksInFlight = kChunksAhead, typename Out, typename Wait>
__device__ __forceinline__ void bf16_product_tile(const DecodeMatmulBf16Arguments<Out>& a,
                                                  int split, int tile, float* shared,
                                                  const Wait& wait_for_inputs) {
  const float2 bias = decode_common::load_tile_bias(a, tile);  // before the wait: a weight
  const TileLane place = tile_lane(a, tile);
  const int octets = a.padded_rows / kBfloatTileK;
  const ChunkRange range = chunk_range(a, split);
  const auto load_weights = [&](int chunk_in_range, uint4(&pieces)[2]) {
    const int octet = (range.first + chunk_in_range) * kOctetsPerChunk + place.octet;  // of 8 inputs
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8) {
      pieces[n8] = make_uint4(0, 0, 0, 0);
      if (chunk_in_range < range.count && octet < octets && place.column_inside[n8])
        pieces[n8] = __ldg(reinterpret_cast<const uint4*>(
            a.weight + (static_cast<std::size_t>(octet) * a.N + place.columns[n8]) * kBfloatTileK));
    }
  };

  float sums[kRows / 16][2][4] = {};
  uint4 ahead[kChunksInFlight][2];
#pragma unroll
  for (int i = 0; i < kChunksInFlight; ++i) load_weights(i, ahead[i]);
  // The weight loads above do not depend on the kernel before; x, the residual stream
  // and the workspace do (decode_matmul.cuh: programmatic launch). The wait sits in its
  // own branch: in one basic block with the loads, ptxas schedules it first (ACQBULK
  // before the first LDG), and the weight would start moving only once the kernel before
  // has finished; the kernel report checks the order (LDG.E.128<ACQBULK). Launched
  // without the attribute, a kernel has nothing to wait for.
  wait_for_inputs();
  for (int chunk = 0; chunk < range.count; chunk += kChunksInFlight) {
#pragma unroll
    for (int i = 0; i < kChunksInFlight; ++i) {
      if (chunk + i >= range.count) break;  // the same for the whole block
      const int k = (range.first + chunk + i) * kChunkRows + kBfloatTileK * place.octet;
      multiply_chunk<kRows, kXVector>(a, place, k, ahead[i], sums);
      load_weights(chunk + i + kChunksInFlight, ahead[i]);
    }
  }
  // Unlike the fp32 kernels, the next kernel may launch only once every block has read
  // its last weight chunk (kernels/decode_matmul.cuh, "Programmatic dependent launch"):
  // a bf16 product streams half fp32's bytes, so at small B its stream is most of its
  // time, and a neighbour launched early would share it.
  allow_next_kernel_to_launch();

  decode_common::store_mma_sums<kRows>(shared, place.k_group, place.column_group, place.g, place.u,
                                       sums);
  decode_common::finish_tile<kRows>(a, tile, split, bias, shared, kKGroups);
}

}  // namespace ladder::decode_bf16
