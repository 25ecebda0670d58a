// kernels/online_softmax.cuh - the warp-level core of the attention kernels: one query
// against a run of key/value rows, with the softmax computed online (one pass,
// no array of scores), and the exact merge of partial results.
//
// A warp takes up to 32 key positions at a time, one per lane. Each lane computes its
// key's score q . k (q already scaled by 1 / sqrt(D)) plus an additive mask (0, or -inf
// for a masked position); the warp updates its running maximum m and its running sum
// l = sum exp(score - m), rescales what it has accumulated by exp(m_old - m_new), and
// then broadcasts the 32 probabilities one by one (register shuffles) while every lane
// accumulates p * v[d] for its own dimensions d = lane, lane + 32, ... of the head.
//
// States of disjoint position ranges (warps of a block, blocks of a split) merge exactly:
//   M = max_i m_i,   l = sum_i exp(m_i - M) l_i,   acc = sum_i exp(m_i - M) acc_i,
// and the attention output is acc / l. A state that saw no unmasked position has
// m = -inf, l = 0, acc = 0 and weighs exp(-inf) = 0 in the merge.
//
// kDims, the head dimensions each lane holds, is ceil(D / 32) (2 for GPT-2's D = 64),
// a compile-time constant so that the accumulators stay in registers and the value
// loads need no branch; see dims_per_lane() in attention_dispatch.cuh.
#pragma once

#include <cmath>
#include <cstddef>

#include "kernels/attention.cuh"
#include "kernels/device_primitives.cuh"

namespace ladder {

/// What one warp has accumulated over the key positions it has seen so far.
template <int kDims>
struct OnlineSoftmax {
  float running_max = -INFINITY;  ///< m: the largest score so far
  float running_sum = 0.0f;       ///< l: sum of exp(score - m)
  /// sum of exp(score - m) * v[d] for this lane's dimensions d = lane + 32 * i (those
  /// with d >= D accumulate a copy of v[D - 1] and are never stored).
  float weighted_values[kDims] = {};
};

/// The key and value rows (D floats each) of one cached position.
struct KeyValueRows {
  const float* key;
  const float* value;
};

/// query . key for one lane's key row (D <= 32 kDims); query lives in shared memory.
/// The loop has a compile-time trip count and is unrolled, so that a lane has up to 16
/// loads of its key row in flight at once (the whole row when D = 64 and kWidth = 4)
/// instead of waiting for one memory round trip after another. kWidth independent
/// partial sums keep the FMA chains short; kWidth = 4 needs both rows 16-byte aligned
/// and D % 4 == 0.
template <int kWidth, int kDims>
__device__ __forceinline__ float dot_with_query(const float* query, const float* key, int D) {
  constexpr int kMaxPacks = kDims * kWarpSize / kWidth;
  const int packs = D / kWidth;
  float partial[kWidth] = {};
#pragma unroll 16
  for (int i = 0; i < kMaxPacks; ++i) {
    if (i < packs) {
      const PackedFloats<kWidth> q = load_packed<kWidth>(query, i);
      const PackedFloats<kWidth> k = load_packed<kWidth>(key, i);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) partial[j] += q.values[j] * k.values[j];
    }
  }
  float dot = 0.0f;
#pragma unroll
  for (int j = 0; j < kWidth; ++j) dot += partial[j];
  return dot;
}

/// Folds positions first .. first + count - 1 (1 <= count <= 32, the same on every
/// lane) into the warp's state. rows_of(s) returns the KeyValueRows of position s.
/// Positions s >= first_masked get -inf added to their score, as an additive attention
/// mask does: their rows are still read (a mask does not skip work), and they weigh 0.
/// Pass first_masked >= first + count for no mask. D <= 32 * kDims.
template <int kWidth, int kDims, typename RowsOf>
__device__ __forceinline__ void fold_positions(const float* query, const RowsOf& rows_of, int first,
                                               int count, int first_masked, int D, int lane,
                                               OnlineSoftmax<kDims>& state) {
  float score = -INFINITY;  // lanes past the end of the run
  if (lane < count) {
    const int s = first + lane;
    const float mask = s < first_masked ? 0.0f : -INFINITY;
    score = dot_with_query<kWidth, kDims>(query, rows_of(s).key, D) + mask;
  }
  const float new_max = fmaxf(state.running_max, warp_max(score));
  // Every score so far masked: new_max = -inf, and exp(score - new_max) would be
  // exp(-inf + inf) = NaN. Shifting by 0 instead keeps every probability at exp(-inf) = 0.
  const float shift = new_max == -INFINITY ? 0.0f : new_max;
  const float probability = expf(score - shift);
  const float rescale = expf(state.running_max - shift);  // 0 while nothing was seen
  state.running_sum = state.running_sum * rescale + warp_sum(probability);
#pragma unroll
  for (int i = 0; i < kDims; ++i) state.weighted_values[i] *= rescale;

  // Lanes whose dimension d is past the row read v[D - 1] instead (an in-bounds
  // broadcast), and positions past the end of a short run read the run's last row again
  // with probability 0 (adding p * v = +0 changes no sum): no branch and a fixed trip
  // count, so the loop unrolls and the value rows of many positions are loaded at once
  // instead of one memory round trip per position, even for a run's last, short chunk.
  int columns[kDims];
#pragma unroll
  for (int i = 0; i < kDims; ++i) columns[i] = min(lane + i * kWarpSize, D - 1);
#pragma unroll 16
  for (int j = 0; j < kWarpSize; ++j) {
    const float p = __shfl_sync(kFullWarpMask, probability, j);  // 0 for j >= count
    const float* value = rows_of(first + min(j, count - 1)).value;
#pragma unroll
    for (int i = 0; i < kDims; ++i) state.weighted_values[i] += p * value[columns[i]];
  }
  state.running_max = new_max;
}

/// The states of the kWarps warps of a block, gathered in shared memory to be merged.
template <int kWarps>
struct WarpStates {
  float running_max[kWarps];
  float running_sum[kWarps];
  float weighted_values[kWarps][kMaxHeadDim];

  /// Every lane of warp `warp` stores its part of `state` (dimensions d < D).
  template <int kDims>
  __device__ __forceinline__ void store(int warp, int lane, int D,
                                        const OnlineSoftmax<kDims>& state) {
    if (lane == 0) {
      running_max[warp] = state.running_max;
      running_sum[warp] = state.running_sum;
    }
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < D) weighted_values[warp][d] = state.weighted_values[i];
    }
  }

  /// The largest running maximum over the warps (after a __syncthreads()).
  __device__ __forceinline__ float block_max() const {
    float result = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) result = fmaxf(result, running_max[w]);
    return result;
  }

  /// The merged running sum and the merged accumulated value of dimension d, both
  /// relative to `shift` (block_max()), merged in the fixed order w = 0, 1, ...
  __device__ __forceinline__ void merge(float shift, int d, float& sum, float& value) const {
    sum = 0.0f;
    value = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = expf(running_max[w] - shift);  // 0 for a warp that saw nothing
      sum += running_sum[w] * weight;
      value += weighted_values[w][d] * weight;
    }
  }
};

/// One block of kWarps warps attends one query over positions 0 .. count - 1 of one
/// head's cache: query_row holds the query's D floats (unscaled), position s has its
/// key at head_keys + s D and its value at head_values + s D, and positions >=
/// first_masked are masked (read, and weighed 0; pass count or more for no mask, and
/// keep first_masked >= 1). Writes the D outputs to out_row. Warp w folds the chunks of
/// 32 positions starting at 32 w, 32 (w + kWarps), ...; the warp states are merged
/// through shared memory in warp order. `query` (kMaxHeadDim floats, 16-byte aligned)
/// and `warp_states` are the block's shared memory; every thread of the block calls it.
template <int kWarps, int kWidth, int kDims>
__device__ __forceinline__ void attend_in_block(const float* query_row, const float* head_keys,
                                                const float* head_values, int count,
                                                int first_masked, int D, float* out_row,
                                                float* query, WarpStates<kWarps>& warp_states) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  for (int d = threadIdx.x; d < D; d += blockDim.x) query[d] = query_row[d] * scale;
  __syncthreads();

  const auto rows_of = [=](int s) {
    const std::size_t row = static_cast<std::size_t>(s) * D;
    return KeyValueRows{head_keys + row, head_values + row};
  };
  OnlineSoftmax<kDims> state;
  for (int first = warp * kWarpSize; first < count; first += kWarps * kWarpSize)
    fold_positions<kWidth>(query, rows_of, first, min(kWarpSize, count - first), first_masked, D,
                           lane, state);

  warp_states.store(warp, lane, D, state);
  __syncthreads();
  const float shift = warp_states.block_max();  // finite: warp 0 saw position 0, unmasked
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f;
    float value = 0.0f;
    warp_states.merge(shift, d, sum, value);
    out_row[d] = value / sum;
  }
}

}  // namespace ladder
