// kernels/cache_attention_bf16_head.cuh - the body of the bf16 decode attention for one
// (row b, head h): 128 threads, 16 groups of 8 lanes, each group one cache position at a
// time, an online softmax per group in fp32, the groups merged in group order. Shared by
// the attention kernel (cache_attention_bf16.cu, one block per (b, h)) and the persistent
// decode kernel (persistent_decode.cu, one instruction per (b, h)), so both give the same
// bits. Notation and layouts: cache_attention_bf16.cuh.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>

#include "kernels/bfloat16_packs.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/kernel_limits.hpp"

namespace ladder {

constexpr int kAttentionThreads = 128;
constexpr int kAttentionLanesPerPosition = 8;
constexpr int kAttentionGroups = kAttentionThreads / kAttentionLanesPerPosition;
constexpr int kAttentionPiecesPerLane = kMaxHeadDim / kBfloatPack / kAttentionLanesPerPosition;
static_assert(kAttentionThreads >= kMaxHeadDim, "the merge gives every output dimension a thread");

/// The groups' softmax states, merged at the end (shared memory).
struct AttentionShared {
  float group_max[kAttentionGroups];
  float group_sum[kAttentionGroups];
  float group_values[kAttentionGroups][kMaxHeadDim];
};

// Math:   keys[b, h, p] = k_b, values[b, h, p] = v_b (from qkv), then
//         out[b, h*D + d] = bf16(sum_{s <= p} e_s values[b, h, s, d] / sum_s e_s),
//         e_s = exp(score_s - max score), score_s = q_b . keys[b, h, s] / sqrt(D), fp32.
// Shapes: qkv [B, 3C]; keys, values [B, H, capacity, D]; out [B, C]; D % 8 == 0,
//         D <= kMaxHeadDim.
// Threads: `thread` in [0, 128): group G = thread / 8 takes positions G, G + 16, ...
//         (rounds of 16); lane j = thread % 8 of a group holds pieces j and j + 8 (8 dims
//         each) of q, the key and the value. `sync_threads()` is a barrier of the 128
//         threads (a block barrier, or a named barrier of a part of a larger block).
// A position p outside [0, capacity) gives NaN outputs and writes no cache entry.
template <typename Barrier>
__device__ __forceinline__ void attend_head_bf16(int b, int h, int p, const __nv_bfloat16* qkv,
                                                 __nv_bfloat16* keys, __nv_bfloat16* values,
                                                 int capacity, __nv_bfloat16* out, int H, int C,
                                                 int thread, AttentionShared& shared,
                                                 const Barrier& sync_threads) {
  float* group_max = shared.group_max;
  float* group_sum = shared.group_sum;
  auto& group_values = shared.group_values;
  const int D = C / H;
  const int pieces = D / kBfloatPack;
  const int group = thread / kAttentionLanesPerPosition;
  const int lane = thread % kAttentionLanesPerPosition;
  __nv_bfloat16* out_head = out + static_cast<std::size_t>(b) * C + h * D;
  if (p < 0 || p >= capacity) {
    if (thread < D) out_head[thread] = __float2bfloat16_rn(NAN);
    return;
  }
  const __nv_bfloat16* row = qkv + static_cast<std::size_t>(b) * 3 * C + h * D;
  const __nv_bfloat16* new_key = row + C;
  const __nv_bfloat16* new_value = row + 2 * C;
  const std::size_t head_offset = static_cast<std::size_t>(b * H + h) * capacity * D;
  const float scale = rsqrtf(static_cast<float>(D));

  PackedFloats<kBfloatPack> q[kAttentionPiecesPerLane];
  PackedFloats<kBfloatPack> accumulated[kAttentionPiecesPerLane];
#pragma unroll
  for (int i = 0; i < kAttentionPiecesPerLane; ++i) {
    const int piece = lane + i * kAttentionLanesPerPosition;
#pragma unroll
    for (int j = 0; j < kBfloatPack; ++j) accumulated[i].values[j] = 0.0f;
    if (piece < pieces) {
      q[i] = load_bfloat16_pack<kBfloatPack>(row, piece);
#pragma unroll
      for (int j = 0; j < kBfloatPack; ++j) q[i].values[j] *= scale;
    }
  }

  float running_max = -INFINITY;
  float running_sum = 0.0f;
  // Rounds of 16 positions, the same count for every lane: the shuffles below need the
  // whole warp, so a group past p sits a round out instead of leaving the loop.
  for (int first = 0; first <= p; first += kAttentionGroups) {
    const int s = first + group;
    const bool active = s <= p;
    const bool newest = s == p;
    const __nv_bfloat16* key =
        newest ? new_key : keys + head_offset + static_cast<std::size_t>(s) * D;
    const __nv_bfloat16* value =
        newest ? new_value : values + head_offset + static_cast<std::size_t>(s) * D;
    PackedFloats<kBfloatPack> value_pieces[kAttentionPiecesPerLane];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kAttentionPiecesPerLane; ++i) {
      const int piece = lane + i * kAttentionLanesPerPosition;
      if (active && piece < pieces) {
        const PackedFloats<kBfloatPack> key_piece = load_bfloat16_pack<kBfloatPack>(key, piece);
        value_pieces[i] = load_bfloat16_pack<kBfloatPack>(value, piece);
#pragma unroll
        for (int j = 0; j < kBfloatPack; ++j) dot = fmaf(q[i].values[j], key_piece.values[j], dot);
        if (newest) {  // append: the cache row of position p, exactly the bf16 of qkv
          const std::size_t at = head_offset + static_cast<std::size_t>(p) * D;
          store_bfloat16_pack<kBfloatPack>(keys + at, piece, key_piece);
          store_bfloat16_pack<kBfloatPack>(values + at, piece, value_pieces[i]);
        }
      }
    }
#pragma unroll
    for (int offset = 1; offset < kAttentionLanesPerPosition; offset *= 2)
      dot += __shfl_xor_sync(kFullWarpMask, dot, offset);
    if (!active) continue;
    const float new_max = fmaxf(running_max, dot);
    const float correction = expf(running_max - new_max);
    const float weight = expf(dot - new_max);
    running_sum = running_sum * correction + weight;
    running_max = new_max;
#pragma unroll
    for (int i = 0; i < kAttentionPiecesPerLane; ++i) {
      if (lane + i * kAttentionLanesPerPosition < pieces) {
#pragma unroll
        for (int j = 0; j < kBfloatPack; ++j)
          accumulated[i].values[j] =
              fmaf(weight, value_pieces[i].values[j], accumulated[i].values[j] * correction);
      }
    }
  }

  // Merge the groups in group order: rescale each to the overall maximum and add.
  if (lane == 0) {
    group_max[group] = running_max;
    group_sum[group] = running_sum;
  }
#pragma unroll
  for (int i = 0; i < kAttentionPiecesPerLane; ++i) {
    const int piece = lane + i * kAttentionLanesPerPosition;
    if (piece < pieces) {
#pragma unroll
      for (int j = 0; j < kBfloatPack; ++j)
        group_values[group][piece * kBfloatPack + j] = accumulated[i].values[j];
    }
  }
  sync_threads();
  if (thread < D) {
    float overall_max = -INFINITY;
    for (int g = 0; g < kAttentionGroups; ++g) overall_max = fmaxf(overall_max, group_max[g]);
    float total = 0.0f;
    float weighted = 0.0f;
    for (int g = 0; g < kAttentionGroups; ++g) {
      const float rescale = expf(group_max[g] - overall_max);  // 0 for a group with no position
      total = fmaf(group_sum[g], rescale, total);
      weighted = fmaf(group_values[g][thread], rescale, weighted);
    }
    out_head[thread] = __float2bfloat16_rn(weighted / total);
  }
}

}  // namespace ladder
