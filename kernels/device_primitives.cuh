// kernels/device_primitives.cuh - device building blocks shared by the kernel families:
// warp-wide reductions by register shuffles, and packed float access (one 16-byte
// load or store instead of four 4-byte ones).
#pragma once

#include <cstddef>
#include <type_traits>

namespace ladder {

constexpr int kWarpSize = 32;
constexpr unsigned int kFullWarpMask = 0xffffffffu;

/// Sum of `value` over the 32 lanes of a warp; every lane receives the same result
/// (a butterfly: each step adds the same two partial sums on both partner lanes).
__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(kFullWarpMask, value, offset);
  return value;
}

/// Maximum of `value` over the 32 lanes of a warp; every lane receives the result.
__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(kFullWarpMask, value, offset));
  return value;
}

/// kWidth consecutive floats moved as one unit. With kWidth = 4 the alignment makes
/// the compiler emit one 128-bit load or store (the pointer must be 16-byte aligned);
/// kWidth = 1 is the scalar fallback, so one kernel template serves both paths.
template <int kWidth>
struct alignas(sizeof(float) * kWidth) PackedFloats {
  float values[kWidth];
};

/// Pack `index` of an array viewed as packs of kWidth floats.
template <int kWidth>
__device__ __forceinline__ PackedFloats<kWidth> load_packed(const float* row, std::size_t index) {
  return reinterpret_cast<const PackedFloats<kWidth>*>(row)[index];
}

template <int kWidth>
__device__ __forceinline__ void store_packed(float* row, std::size_t index,
                                             const PackedFloats<kWidth>& pack) {
  reinterpret_cast<PackedFloats<kWidth>*>(row)[index] = pack;
}

/// Host side: calls launch(std::integral_constant<int, 4>) when `packed` (every pointer
/// 16-byte aligned and every row a multiple of 4 floats), else with 1, so that a
/// launcher names its kernel once: launch = [&](auto width) { kernel<width.value>... }.
template <typename Launch>
void with_width(bool packed, const Launch& launch) {
  if (packed) {
    launch(std::integral_constant<int, 4>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

}  // namespace ladder
