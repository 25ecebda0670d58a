// kernels/argmax_order.cuh - the order under which every argmax kernel picks its winner,
// shared by the greedy step (sampling.cu) and the LM head's fused first pass
// (decode_matmul.cu), so that a two-pass argmax picks exactly what one pass picks.
//
// One strict total order on (value, index) pairs: the larger value wins, a NaN beats
// every number, and among equals (or among NaNs) the smaller index wins - torch.argmax's
// rule. Because the order is total, the winner does not depend on how threads, warps or
// blocks split the row.
#pragma once

#include <climits>
#include <cmath>

#include "kernels/device_primitives.cuh"

namespace ladder {

/// A candidate for the argmax; index INT_MAX with value -inf stands for "no element",
/// which loses to every real element (a real -inf wins it by its smaller index).
struct Candidate {
  float value;
  int index;
};

/// The "no element" candidate.
__device__ __forceinline__ Candidate no_candidate() { return Candidate{-INFINITY, INT_MAX}; }

/// True when `a` should be the argmax rather than `b`.
__device__ __forceinline__ bool beats(const Candidate& a, const Candidate& b) {
  const bool a_nan = isnan(a.value);
  const bool b_nan = isnan(b.value);
  if (a_nan != b_nan) return a_nan;
  if (a_nan || a.value == b.value) return a.index < b.index;
  return a.value > b.value;
}

/// The winner among the 32 lanes' candidates; every lane receives it.
__device__ __forceinline__ Candidate warp_argmax(Candidate candidate) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const Candidate other{__shfl_xor_sync(kFullWarpMask, candidate.value, offset),
                          __shfl_xor_sync(kFullWarpMask, candidate.index, offset)};
    if (beats(other, candidate)) candidate = other;
  }
  return candidate;
}

/// The winner among `count` candidates (values[v], indices ? indices[v] : v) for a block
/// of kThreads threads (a multiple of 32, at most 32 x 32): thread i scans v = i,
/// i + kThreads, ... (coalesced), each warp reduces its lanes by shuffles, and every warp
/// then reduces the per-warp winners from `warp_winners` (shared memory, [kThreads / 32]):
/// every thread receives the winner. The order is total, so the winner does not depend on
/// kThreads. Every thread of the block must call it (it holds a __syncthreads).
template <int kThreads>
__device__ __forceinline__ Candidate block_argmax(const float* values, const int* indices,
                                                  int count, Candidate* warp_winners) {
  static_assert(kThreads % kWarpSize == 0 && kThreads <= kWarpSize * kWarpSize,
                "the last stage reduces one winner per lane");
  constexpr int kWarps = kThreads / kWarpSize;
  Candidate best = no_candidate();
  for (int v = static_cast<int>(threadIdx.x); v < count; v += kThreads) {
    const Candidate current{values[v], indices != nullptr ? indices[v] : v};
    if (beats(current, best)) best = current;
  }
  best = warp_argmax(best);
  if (threadIdx.x % kWarpSize == 0) warp_winners[threadIdx.x / kWarpSize] = best;
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  return warp_argmax(lane < kWarps ? warp_winners[lane] : no_candidate());
}

}  // namespace ladder
