// kernels/bfloat16_packs.cuh - bf16 values moved in packs of 8 (one 16-byte load or
// store) and widened to fp32 for the arithmetic, or one at a time (the scalar path of
// a kernel template, as PackedFloats<1> in device_primitives.cuh). Narrowing rounds to
// nearest even (__float2bfloat16_rn), as common/bfloat16.hpp does on the host.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/device_primitives.cuh"

namespace ladder {

/// bf16 per 16-byte pack.
constexpr int kBfloatPack = 8;

/// Pack `index` of a bf16 array viewed as packs of kWidth (8: one 16-byte load, the
/// array 16-byte aligned; 1: one value), widened to floats.
template <int kWidth>
__device__ __forceinline__ PackedFloats<kWidth> load_bfloat16_pack(const __nv_bfloat16* values,
                                                                   std::size_t index) {
  static_assert(kWidth == kBfloatPack || kWidth == 1, "packs of 8 bf16 or single values");
  PackedFloats<kWidth> pack;
  if constexpr (kWidth == 1) {
    pack.values[0] = __bfloat162float(values[index]);
  } else {
    const uint4 bits = reinterpret_cast<const uint4*>(values)[index];
    const std::uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // A 32-bit word holds two bf16, the lower address in the low half.
      pack.values[2 * i] = __uint_as_float(words[i] << 16);
      pack.values[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
  return pack;
}

/// Rounds a pack of kWidth floats to bf16 and stores it as pack `index` (see above).
template <int kWidth>
__device__ __forceinline__ void store_bfloat16_pack(__nv_bfloat16* values, std::size_t index,
                                                    const PackedFloats<kWidth>& pack) {
  static_assert(kWidth == kBfloatPack || kWidth == 1, "packs of 8 bf16 or single values");
  if constexpr (kWidth == 1) {
    values[index] = __float2bfloat16_rn(pack.values[0]);
  } else {
    std::uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(pack.values[2 * i], pack.values[2 * i + 1]);
      words[i] = *reinterpret_cast<const std::uint32_t*>(&pair);
    }
    reinterpret_cast<uint4*>(values)[index] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

/// One name for either element type, so that a kernel template serves fp32 and bf16:
/// float packs (load_packed) or bf16 packs widened to float and rounded back.
template <int kWidth>
__device__ __forceinline__ PackedFloats<kWidth> load_pack(const float* values, std::size_t index) {
  return load_packed<kWidth>(values, index);
}
template <int kWidth>
__device__ __forceinline__ PackedFloats<kWidth> load_pack(const __nv_bfloat16* values,
                                                          std::size_t index) {
  return load_bfloat16_pack<kWidth>(values, index);
}
template <int kWidth>
__device__ __forceinline__ void store_pack(float* values, std::size_t index,
                                           const PackedFloats<kWidth>& pack) {
  store_packed<kWidth>(values, index, pack);
}
template <int kWidth>
__device__ __forceinline__ void store_pack(__nv_bfloat16* values, std::size_t index,
                                           const PackedFloats<kWidth>& pack) {
  store_bfloat16_pack<kWidth>(values, index, pack);
}

/// Elements of one 16-byte pack: 4 floats or 8 bf16.
template <typename Element>
constexpr int kPackWidth = static_cast<int>(16 / sizeof(Element));

/// Host side: launch(std::integral_constant<int, 8>) when `packed` (every pointer
/// 16-byte aligned, every row a multiple of 8 values), else with 1.
template <typename Launch>
void with_bfloat16_width(bool packed, const Launch& launch) {
  if (packed) {
    launch(std::integral_constant<int, kBfloatPack>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

}  // namespace ladder
