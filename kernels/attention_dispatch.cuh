// kernels/attention_dispatch.cuh - the host side that every attention launcher shares:
// checks of the head layout (B, H, C), and the choice of a kernel instantiation for the
// head size and the alignment of the rows.
//
// The attention kernels are templates on kWidth (4: 16-byte packed reads of the key and
// value rows; 1: the scalar fallback) and kDims (head dimensions a lane holds,
// ceil(D / 32)), so that a lane's accumulators stay in registers and the loads need no
// branch. with_width_and_dims() turns the run-time (packed, D) into those constants.
#pragma once

#include <string>
#include <type_traits>

#include "kernels/attention.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

/// Head dimensions per lane: ceil(D / 32), at most kMaxHeadDim / 32 (host and device).
constexpr int dims_per_lane(int D) { return (D + kWarpSize - 1) / kWarpSize; }
static_assert(kMaxHeadDim % kWarpSize == 0, "a head row is split evenly over the lanes");

/// Throws std::invalid_argument unless B, H, C > 0, C is divisible by H and B * H (the
/// number of heads, one or more blocks each) fits in an int.
inline void check_attention_heads(const char* launcher, int B, int H, int C) {
  launch_checks::require_positive(launcher, "B", B);
  launch_checks::require_positive(launcher, "H", H);
  launch_checks::require_positive(launcher, "C", C);
  launch_checks::require_divisible(launcher, "C", C, "H", H);
  launch_checks::require(static_cast<long long>(B) * H <= 0x7fffffff, launcher,
                         "B * H must fit in an int");
}

/// check_attention_heads(), and the head size D = C / H at most kMaxHeadDim.
inline void check_attention_head_size(const char* launcher, int B, int H, int C) {
  check_attention_heads(launcher, B, H, C);
  launch_checks::require_at_most(launcher, "the head size D = C / H", C / H, kMaxHeadDim,
                                 "a warp holds a row of D values, D / 32 registers a lane "
                                 "(kMaxHeadDim)");
}

/// Throws std::invalid_argument unless q's rows, q_row_stride floats apart, hold C
/// floats each (C for a [B, C] buffer; 3C reads the q third of a [B, 3C] qkv in place).
inline void check_query_row_stride(const char* launcher, int q_row_stride, int C) {
  if (q_row_stride < C)
    launch_checks::fail(launcher, "q_row_stride (" + std::to_string(q_row_stride) +
                                      ") must be >= C (" + std::to_string(C) + ")");
}

/// Whether every key and value row of a [B, H, capacity, D] cache can be read in
/// 16-byte packs: D % 4 == 0 and both caches 16-byte aligned (q is read element by
/// element, into shared memory).
inline bool cache_rows_are_packed(int D, const float* keys, const float* values) {
  return D % 4 == 0 && launch_checks::is_16_byte_aligned(keys) &&
         launch_checks::is_16_byte_aligned(values);
}

/// Calls launch(width, dims) with std::integral_constant arguments: width 4 when
/// `packed` (the caller has checked D % 4 == 0 and the alignment of every row it reads
/// packed), else 1; dims = dims_per_lane(D), D <= kMaxHeadDim.
template <typename Launch>
void with_width_and_dims(bool packed, int D, const Launch& launch) {
  static_assert(kMaxHeadDim / kWarpSize == 4, "one case per possible dims_per_lane(D)");
  const auto with_dims = [&](auto width) {
    switch (dims_per_lane(D)) {
      case 1:
        launch(width, std::integral_constant<int, 1>{});
        break;
      case 2:
        launch(width, std::integral_constant<int, 2>{});
        break;
      case 3:
        launch(width, std::integral_constant<int, 3>{});
        break;
      default:
        launch(width, std::integral_constant<int, 4>{});
        break;
    }
  };
  with_width(packed, with_dims);
}

}  // namespace ladder
