// kernels/decode_matmul_tail.cuh - the end of every decode matmul, fp32, tf32 and bf16
// alike (decode_matmul.cu, decode_matmul_bf16.cu): the k-groups of warps summed in
// group order, the splits of K summed in split order by the block that arrives last,
// and the epilogue (bias, GELU, residual, the LM head's candidates) on the finished tile.
//
// A block ends with its partial tile of [rows][kDecodeTileStride] floats in shared
// memory, one per k-group of warps. `Arguments` is a kernel's argument struct; the
// functions read its members B, N, column_tiles, chunks, splits, chunks_per_split,
// partials, tile_counters, epilogue, bias, out, out_pairs, candidate_values and
// candidate_indices. bias and out may point to float or to __nv_bfloat16: values are
// widened to float on load, the epilogue runs in fp32 and the result is rounded once,
// to nearest even, when it is stored (common/reference.hpp, points R4, R6, R7).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/argmax_order.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/device_primitives.cuh"

namespace ladder::decode_tail {

constexpr int kThreads = 256;  // every decode-matmul block
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kTileColumns = kDecodeTileColumns;     // 64
constexpr int kTileStride = kDecodeTileColumns + 4;  // floats between two rows of a tile

__device__ __forceinline__ float widen(float value) { return value; }
__device__ __forceinline__ float widen(__nv_bfloat16 value) { return __bfloat162float(value); }

/// Two neighbouring outputs, columns n and n + 1, as one 8-byte (float) or 4-byte (bf16)
/// store; `at` must be aligned to the pair.
__device__ __forceinline__ void store_pair(float* at, float first, float second) {
  *reinterpret_cast<float2*>(at) = make_float2(first, second);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16* at, float first, float second) {
  *reinterpret_cast<__nv_bfloat162*>(at) = __floats2bfloat162_rn(first, second);
}
__device__ __forceinline__ void store_one(float* at, float value) { *at = value; }
__device__ __forceinline__ void store_one(__nv_bfloat16* at, float value) {
  *at = __float2bfloat16_rn(value);
}

/// Adds the k-groups' tiles (tile g at shared + g * kRows * kTileStride) in group order
/// into the first; rows below B only.
template <int kRows>
__device__ __forceinline__ void sum_k_groups(float* shared, int groups, int B) {
  constexpr int kQuads = kTileColumns / 4;
  for (int e = threadIdx.x; e < B * kQuads; e += kThreads) {
    const int offset = (e / kQuads) * kTileStride + 4 * (e % kQuads);
    float4 sum = *reinterpret_cast<const float4*>(shared + offset);
    for (int g = 1; g < groups; ++g) {
      const float4 more =
          *reinterpret_cast<const float4*>(shared + g * kRows * kTileStride + offset);
      sum.x += more.x;
      sum.y += more.y;
      sum.z += more.z;
      sum.w += more.w;
    }
    *reinterpret_cast<float4*>(shared + offset) = sum;
  }
  __syncthreads();
}

/// With S > 1: writes this block's tile to the workspace; the block that completes the
/// tile's set sums the S partials in split order into `tile` and returns true, the
/// others return false (and have nothing left to do). With S = 1: true at once.
template <typename Arguments>
__device__ __forceinline__ bool gather_splits(const Arguments& a, int tile, int split,
                                              float* tile_values) {
  if (a.splits == 1) return true;
  __shared__ bool last_to_arrive;
  constexpr int kQuads = kTileColumns / 4;
  const std::size_t tile_floats = static_cast<std::size_t>(a.B) * kTileColumns;
  const auto partial = [&](int s) {
    return a.partials + (static_cast<std::size_t>(s) * a.column_tiles + tile) * tile_floats;
  };
  float* mine = partial(split);
  for (int e = threadIdx.x; e < a.B * kQuads; e += kThreads) {
    const int row = e / kQuads;
    const int column = 4 * (e % kQuads);
    __stcg(reinterpret_cast<float4*>(mine + row * kTileColumns + column),
           *reinterpret_cast<const float4*>(tile_values + row * kTileStride + column));
  }
  __threadfence();  // the partial is visible device-wide before the counter moves
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int arrived = atomicAdd(a.tile_counters + tile, 1u);
    last_to_arrive = arrived == static_cast<unsigned int>(a.splits - 1);
  }
  __syncthreads();
  if (!last_to_arrive) return false;
  __threadfence();  // see the other blocks' partials, not stale lines
  for (int e = threadIdx.x; e < a.B * kQuads; e += kThreads) {
    const int offset = (e / kQuads) * kTileColumns + 4 * (e % kQuads);
    float4 sum = __ldcg(reinterpret_cast<const float4*>(partial(0) + offset));
#pragma unroll 4
    for (int s = 1; s < a.splits; ++s) {  // unrolled: several loads in flight
      const float4 more = __ldcg(reinterpret_cast<const float4*>(partial(s) + offset));
      sum.x += more.x;
      sum.y += more.y;
      sum.z += more.z;
      sum.w += more.w;
    }
    *reinterpret_cast<float4*>(tile_values + (e / kQuads) * kTileStride + 4 * (e % kQuads)) = sum;
  }
  if (threadIdx.x == 0) a.tile_counters[tile] = 0;  // ready for the next launch
  __syncthreads();
  return true;
}

/// The epilogue on the finished tile [B][kTileStride] (columns 64 tile ..): warp w takes
/// rows w, w + 8, ...; lane l columns 2 l and 2 l + 1. Writes out (rounded once to its
/// type) and, for the LM head, each row's best (value, index) of the tile, taken on the
/// stored values.
template <typename Arguments>
__device__ __forceinline__ void store_tile(const Arguments& a, int tile, const float* tile_values) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int first_column = tile * kTileColumns + 2 * lane;
  for (int b = warp; b < a.B; b += kWarps) {
    const float2 pair = *reinterpret_cast<const float2*>(tile_values + b * kTileStride + 2 * lane);
    float values[2] = {pair.x, pair.y};
    auto* out_row = a.out != nullptr ? a.out + static_cast<std::size_t>(b) * a.N : nullptr;
    Candidate best = no_candidate();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int n = first_column + j;
      if (n >= a.N) continue;
      float y = values[j];
      if (a.epilogue != DecodeEpilogue::kNone) y += widen(a.bias[n]);
      if (a.epilogue == DecodeEpilogue::kBiasGelu) y = gelu(y);
      if (a.epilogue == DecodeEpilogue::kBiasResidual) y += widen(out_row[n]);
      values[j] = y;
      const Candidate mine{y, n};
      if (beats(mine, best)) best = mine;
    }
    if (out_row != nullptr) {
      if (a.out_pairs && first_column + 1 < a.N) {
        store_pair(out_row + first_column, values[0], values[1]);
      } else {
        for (int j = 0; j < 2; ++j)
          if (first_column + j < a.N) store_one(out_row + first_column + j, values[j]);
      }
    }
    if (a.candidate_values != nullptr) {
      best = warp_argmax(best);
      if (lane == 0) {
        a.candidate_values[static_cast<std::size_t>(b) * a.column_tiles + tile] = best.value;
        a.candidate_indices[static_cast<std::size_t>(b) * a.column_tiles + tile] = best.index;
      }
    }
  }
}

/// The chunks of split `split`: [first, first + count).
struct ChunkRange {
  int first;
  int count;
};

template <typename Arguments>
__device__ __forceinline__ ChunkRange chunk_range(const Arguments& a, int split) {
  const int first = split * a.chunks_per_split;
  return ChunkRange{first, min(a.chunks_per_split, a.chunks - first)};
}

}  // namespace ladder::decode_tail
