// kernels/cache_attention_bf16.cu - decode attention over a bf16 KV cache: one block per
// (b, h), 16 groups of 8 lanes, each group one cache position at a time, an online
// softmax per group in fp32, the 16 groups' states merged in group order at the end.
//
// A key or value row of D = 64 bf16 is 128 bytes: 8 lanes x one 16-byte piece (D = 128:
// two pieces per lane), so a warp reads 4 positions' keys per instruction, fully
// coalesced, and the score is the 8 lanes' partial dots added by 3 shuffles.
#include "kernels/cache_attention_bf16.cuh"

#include <cmath>
#include <cstddef>

#include "common/cuda_check.hpp"
#include "kernels/bfloat16_packs.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/kernel_limits.hpp"
#include "kernels/launch_checks.hpp"
#include "kernels/programmatic_launch.cuh"

namespace ladder {

namespace {

constexpr int kThreads = 128;
constexpr int kLanesPerPosition = 8;
constexpr int kGroups = kThreads / kLanesPerPosition;  // positions attended side by side
constexpr int kPiecesPerLane = kMaxHeadDim / kBfloatPack / kLanesPerPosition;  // 2
static_assert(kThreads >= kMaxHeadDim, "the merge gives every output dimension a thread");

// Math:   keys[b, h, p] = k_b, values[b, h, p] = v_b (from qkv), then
//         out[b, h*D + d] = bf16(sum_{s <= p} e_s values[b, h, s, d] / sum_s e_s),
//         e_s = exp(score_s - max score), score_s = q_b . keys[b, h, s] / sqrt(D), fp32.
// Shapes: qkv [B, 3C]; keys, values [B, H, capacity, D]; out [B, C]; D % 8 == 0,
//         D <= kMaxHeadDim.
// Grid:   one block per (b, h) (blockIdx.x = b H + h), 128 threads: group
//         G = threadIdx.x / 8 takes positions G, G + 16, ... (rounds of 16); lane j = threadIdx.x %
//         8 of a group holds pieces j and j + 8 (8 dims each) of q, the key and the value.
// Promises: LDG.E.128 STG.E.128 PREEXIT ACQBULK
__global__ void __launch_bounds__(kThreads)
    decode_attention_bf16_kernel(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                 __nv_bfloat16* values, const DecodePosition* cursor, int capacity,
                                 __nv_bfloat16* out, int H, int C, LaunchDependents dependents) {
  // c_proj's decode matmul may start loading its weight now (device_primitives.cuh): its
  // blocks are scheduled once all B H blocks here have started, take only the slots they
  // leave, and load their weight while this kernel reads the cache.
  launch_dependents_at_start(dependents);
  // Under a programmatic launch (DecodeLaunch) this block may start before c_attn has
  // finished writing qkv: nothing is read before the wait (at once for a plain launch).
  wait_for_previous_kernel();
  __shared__ float group_max[kGroups];
  __shared__ float group_sum[kGroups];
  __shared__ float group_values[kGroups][kMaxHeadDim];
  const int D = C / H;
  const int pieces = D / kBfloatPack;
  const int b = blockIdx.x / H;
  const int h = blockIdx.x % H;
  const int group = threadIdx.x / kLanesPerPosition;
  const int lane = threadIdx.x % kLanesPerPosition;
  const int p = cursor->position;
  __nv_bfloat16* out_head = out + static_cast<std::size_t>(b) * C + h * D;
  if (p < 0 || p >= capacity) {
    if (threadIdx.x < D) out_head[threadIdx.x] = __float2bfloat16_rn(NAN);
    return;
  }
  const __nv_bfloat16* row = qkv + static_cast<std::size_t>(b) * 3 * C + h * D;
  const __nv_bfloat16* new_key = row + C;
  const __nv_bfloat16* new_value = row + 2 * C;
  const std::size_t head_offset = static_cast<std::size_t>(blockIdx.x) * capacity * D;
  const float scale = rsqrtf(static_cast<float>(D));

  PackedFloats<kBfloatPack> q[kPiecesPerLane];
  PackedFloats<kBfloatPack> accumulated[kPiecesPerLane];
#pragma unroll
  for (int i = 0; i < kPiecesPerLane; ++i) {
    const int piece = lane + i * kLanesPerPosition;
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
  for (int first = 0; first <= p; first += kGroups) {
    const int s = first + group;
    const bool active = s <= p;
    const bool newest = s == p;
    const __nv_bfloat16* key =
        newest ? new_key : keys + head_offset + static_cast<std::size_t>(s) * D;
    const __nv_bfloat16* value =
        newest ? new_value : values + head_offset + static_cast<std::size_t>(s) * D;
    PackedFloats<kBfloatPack> value_pieces[kPiecesPerLane];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPiecesPerLane; ++i) {
      const int piece = lane + i * kLanesPerPosition;
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
    for (int offset = 1; offset < kLanesPerPosition; offset *= 2)
      dot += __shfl_xor_sync(kFullWarpMask, dot, offset);
    if (!active) continue;
    const float new_max = fmaxf(running_max, dot);
    const float correction = expf(running_max - new_max);
    const float weight = expf(dot - new_max);
    running_sum = running_sum * correction + weight;
    running_max = new_max;
#pragma unroll
    for (int i = 0; i < kPiecesPerLane; ++i) {
      if (lane + i * kLanesPerPosition < pieces) {
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
  for (int i = 0; i < kPiecesPerLane; ++i) {
    const int piece = lane + i * kLanesPerPosition;
    if (piece < pieces) {
#pragma unroll
      for (int j = 0; j < kBfloatPack; ++j)
        group_values[group][piece * kBfloatPack + j] = accumulated[i].values[j];
    }
  }
  __syncthreads();
  if (threadIdx.x < D) {
    float overall_max = -INFINITY;
    for (int g = 0; g < kGroups; ++g) overall_max = fmaxf(overall_max, group_max[g]);
    float total = 0.0f;
    float weighted = 0.0f;
    for (int g = 0; g < kGroups; ++g) {
      const float rescale = expf(group_max[g] - overall_max);  // 0 for a group with no position
      total = fmaf(group_sum[g], rescale, total);
      weighted = fmaf(group_values[g][threadIdx.x], rescale, weighted);
    }
    out_head[threadIdx.x] = __float2bfloat16_rn(weighted / total);
  }
}

}  // namespace

void launch_decode_attention_bf16(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                  __nv_bfloat16* values, const DecodePosition* cursor, int capacity,
                                  __nv_bfloat16* out, int B, int H, int C, cudaStream_t stream,
                                  LaunchDependents dependents, DecodeLaunch launch) {
  constexpr const char* kName = "launch_decode_attention_bf16";
  launch_checks::require_not_null(
      kName, {{"qkv", qkv}, {"keys", keys}, {"values", values}, {"cursor", cursor}, {"out", out}});
  launch_checks::require_positive(kName, {{"B", B}, {"H", H}, {"C", C}, {"capacity", capacity}});
  launch_checks::require_divisible(kName, "C", C, "H", H);
  const int D = C / H;
  // The chapter's case only (no scalar fallback): rows of D in 16-byte packs of 8 bf16.
  launch_checks::require_divisible(kName, "the head size D = C / H", D, "the bf16 pack",
                                   kBfloatPack);
  launch_checks::require_at_most(kName, "the head size D = C / H", D, kMaxHeadDim,
                                 "one thread per head dimension (kMaxHeadDim)");
  launch_checks::require(launch_checks::is_16_byte_aligned(qkv) &&
                             launch_checks::is_16_byte_aligned(keys) &&
                             launch_checks::is_16_byte_aligned(values),
                         kName, "qkv, keys and values must be 16-byte aligned");
  launch_checks::require(static_cast<long long>(B) * H <= 0x7fffffff, kName,
                         "B * H must fit in an int");
  launch_between_products(launch, decode_attention_bf16_kernel,
                          dim3(static_cast<unsigned int>(B * H)), dim3(kThreads), 0, stream, qkv,
                          keys, values, cursor, capacity, out, H, C, dependents);
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
