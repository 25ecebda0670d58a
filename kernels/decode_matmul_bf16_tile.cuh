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
/// One chunk of a tile's weight staged in shared memory: every thread's two 16-byte pieces
/// (64 inputs x 64 columns of bf16, 8 KiB). Slot j holds piece n8 of thread t at uint4
/// (2 j + n8) kThreads + t: a warp's 32 pieces side by side, no bank conflict.
constexpr int kWeightStageBytes = 2 * kThreads * 16;

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

/// The lane's x of one chunk: for each m16 tile, 8 inputs from k of rows g and g + 8.
template <int kRows>
struct ChunkX {
  uint4 upper[kRows / 16];
  uint4 lower[kRows / 16];
};

template <int kRows, bool kXVector, typename Out>
__device__ __forceinline__ ChunkX<kRows> load_chunk_x(const DecodeMatmulBf16Arguments<Out>& a,
                                                      const TileLane& place, int k) {
  ChunkX<kRows> x;
#pragma unroll
  for (int m16 = 0; m16 < kRows / 16; ++m16) {
    x.upper[m16] = load_x<kXVector>(a, 16 * m16 + place.g, k);
    x.lower[m16] = load_x<kXVector>(a, 16 * m16 + place.g + 8, k);
  }
  return x;
}

/// sums += x W for one m16 tile of one chunk: the lane's 8 inputs of rows g (`upper`) and
/// g + 8 (`lower`), times its two pieces of W (8 inputs of one column each), on the
/// tensor cores.
__device__ __forceinline__ void multiply_m16(const uint4& upper, const uint4& lower,
                                             const uint4 (&pieces)[2], float (&sums)[2][4]) {
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    const std::uint32_t a_fragment[4] = {word(upper, 2 * step), word(lower, 2 * step),
                                         word(upper, 2 * step + 1), word(lower, 2 * step + 1)};
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8) {
      const std::uint32_t b_fragment[2] = {word(pieces[n8], 2 * step),
                                           word(pieces[n8], 2 * step + 1)};
      mma_bf16(sums[n8], a_fragment, b_fragment);
    }
  }
}

/// sums += x W for one chunk, its x loaded (load_chunk_x).
template <int kRows>
__device__ __forceinline__ void multiply_chunk(const ChunkX<kRows>& x, const uint4 (&pieces)[2],
                                               float (&sums)[kRows / 16][2][4]) {
#pragma unroll
  for (int m16 = 0; m16 < kRows / 16; ++m16)
    multiply_m16(x.upper[m16], x.lower[m16], pieces, sums[m16]);
}

/// sums += x W for one chunk, each m16 tile's x loaded just before its products: the
/// scalar path (x rows not 16-byte aligned), whose plain 2-byte loads the compiler
/// schedules freely, and which would hold 8 registers a piece if loaded ahead.
template <int kRows, typename Out>
__device__ __forceinline__ void multiply_chunk_loading(const DecodeMatmulBf16Arguments<Out>& a,
                                                       const TileLane& place, int k,
                                                       const uint4 (&pieces)[2],
                                                       float (&sums)[kRows / 16][2][4]) {
#pragma unroll
  for (int m16 = 0; m16 < kRows / 16; ++m16)
    multiply_m16(load_x<false>(a, 16 * m16 + place.g, k),
                 load_x<false>(a, 16 * m16 + place.g + 8, k), pieces, sums[m16]);
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
//
// x's 16-byte loads (__ldcg) and the mma instructions are both asm volatile, so they issue
// in program order, and an mma waits for its x: x loaded just before its products would
// leave for L2 only once the x before it was back. So a lane loads the x of every m16
// tile of kChunksOfX chunks before it multiplies any of them: one round trip to L2 per
// kChunksOfX chunks. 1 keeps the decode-matmul kernels at their registers (three blocks
// a multiprocessor at row tile 16); the persistent kernel, capped at 128 registers
// anyway, takes more (persistent_decode.cu).
//
// The weight streams into registers, kChunksInFlight chunks ahead (kWeightStages 0: the
// decode-matmul kernels), or into kWeightStages slots of shared memory at `weight_stages`
// (kWeightStages x kWeightStageBytes, 16-byte aligned: the persistent kernel), each
// thread copying (cp.async) only the pieces it multiplies, so no barrier guards a slot.
template <int kRows, bool kXVector, int kChunksInFlight = kChunksAhead, int kChunksOfX = 1,
          int kWeightStages = 0, typename Out, typename Wait>
__device__ __forceinline__ void bf16_product_tile(const DecodeMatmulBf16Arguments<Out>& a,
                                                  int split, int tile, float* shared,
                                                  const Wait& wait_for_inputs,
                                                  uint4* weight_stages = nullptr) {
  const float2 bias = decode_common::load_tile_bias(a, tile);  // before the wait: a weight
  const TileLane place = tile_lane(a, tile);
  const int octets = a.padded_rows / kBfloatTileK;
  const ChunkRange range = chunk_range(a, split);
  const auto k_of = [&](int chunk_in_range) {
    return (range.first + chunk_in_range) * kChunkRows + kBfloatTileK * place.octet;
  };
  float sums[kRows / 16][2][4] = {};
  static_assert(kChunksInFlight % kChunksOfX == 0, "x comes a whole group at a time");
  if constexpr (kWeightStages == 0) {
    const auto load_weights = [&](int chunk_in_range, uint4(&pieces)[2]) {
      const int octet = (range.first + chunk_in_range) * kOctetsPerChunk + place.octet;
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8) {
        pieces[n8] = make_uint4(0, 0, 0, 0);
        if (chunk_in_range < range.count && octet < octets && place.column_inside[n8])
          pieces[n8] = __ldg(reinterpret_cast<const uint4*>(
              a.weight +
              (static_cast<std::size_t>(octet) * a.N + place.columns[n8]) * kBfloatTileK));
      }
    };
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
    if constexpr (kXVector) {
      for (int chunk = 0; chunk < range.count; chunk += kChunksInFlight) {
#pragma unroll
        for (int group = chunk; group < chunk + kChunksInFlight; group += kChunksOfX) {
          ChunkX<kRows> x[kChunksOfX];
#pragma unroll
          for (int i = 0; i < kChunksOfX; ++i)
            if (group + i < range.count)
              x[i] = load_chunk_x<kRows, true>(a, place, k_of(group + i));
#pragma unroll
          for (int i = 0; i < kChunksOfX; ++i) {
            if (group + i >= range.count) break;  // the same for the whole block
            multiply_chunk<kRows>(x[i], ahead[group - chunk + i], sums);
            load_weights(group + i + kChunksInFlight, ahead[group - chunk + i]);
          }
        }
      }
    } else {
      for (int chunk = 0; chunk < range.count; chunk += kChunksInFlight) {
#pragma unroll
        for (int i = 0; i < kChunksInFlight; ++i) {
          if (chunk + i >= range.count) break;
          multiply_chunk_loading<kRows>(a, place, k_of(chunk + i), ahead[i], sums);
          load_weights(chunk + i + kChunksInFlight, ahead[i]);
        }
      }
    }
  } else {
    static_assert(kXVector, "the staged weight path reads x 16 bytes at a time");
    static_assert(kWeightStages % kChunksInFlight == 0, "the stages refill a group at a time");
    // Chunk c of the range goes to slot c % kWeightStages. One commit per chunk, an empty
    // one past the range, so that before the group of chunks from `chunk` this thread has
    // committed kWeightStages + chunk groups, and the group's have landed once at most
    // kWeightStages - kChunksInFlight are in flight.
    const unsigned int first_slot = decode_common::shared_address(weight_stages + threadIdx.x);
    const auto stage_weights = [&](int chunk_in_range) {
      if (chunk_in_range < range.count) {
        const int octet = (range.first + chunk_in_range) * kOctetsPerChunk + place.octet;
        const int slot = chunk_in_range % kWeightStages;
#pragma unroll
        for (int n8 = 0; n8 < 2; ++n8) {
          const bool inside = octet < octets && place.column_inside[n8];
          const __nv_bfloat16* source =
              inside ? a.weight + (static_cast<std::size_t>(octet) * a.N + place.columns[n8]) *
                                      kBfloatTileK
                     : a.weight;  // zeros: nothing is read
          decode_common::copy_async<16>(first_slot + (2 * slot + n8) * kThreads * 16, source,
                                        inside);
        }
      }
      decode_common::commit_async_copies();
    };
#pragma unroll
    for (int i = 0; i < kWeightStages; ++i) stage_weights(i);
    wait_for_inputs();  // in its own branch, as above
    for (int chunk = 0; chunk < range.count; chunk += kChunksInFlight) {
      decode_common::wait_async_copies<kWeightStages - kChunksInFlight>();
      // The group's pieces into registers, then its chunks' x and products.
      uint4 pieces[kChunksInFlight][2];
#pragma unroll
      for (int i = 0; i < kChunksInFlight; ++i) {
        const int slot = (chunk + i) % kWeightStages;
#pragma unroll
        for (int n8 = 0; n8 < 2; ++n8)
          pieces[i][n8] = chunk + i < range.count
                              ? weight_stages[(2 * slot + n8) * kThreads + threadIdx.x]
                              : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int first = 0; first < kChunksInFlight; first += kChunksOfX) {
        ChunkX<kRows> x[kChunksOfX];
#pragma unroll
        for (int i = 0; i < kChunksOfX; ++i)
          if (chunk + first + i < range.count)
            x[i] = load_chunk_x<kRows, true>(a, place, k_of(chunk + first + i));
#pragma unroll
        for (int i = 0; i < kChunksOfX; ++i) {
          if (chunk + first + i >= range.count) break;  // the same for the whole block
          multiply_chunk<kRows>(x[i], pieces[first + i], sums);
        }
      }
      // The slots just read refilled, kWeightStages chunks ahead: after the products that
      // used their pieces (asm volatile keeps the copies behind the mma instructions).
#pragma unroll
      for (int i = 0; i < kChunksInFlight; ++i) stage_weights(chunk + i + kWeightStages);
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
