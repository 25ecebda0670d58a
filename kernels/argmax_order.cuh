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

}  // namespace ladder
