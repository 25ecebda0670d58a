// kernels/layernorm_row.cuh - the body of a LayerNorm row (one block of 256 threads),
// shared by the LayerNorm kernels (layernorm.cu) and the persistent decode kernel
// (persistent_decode.cu), so that both round at the same points with the same sums.
#pragma once

#include <cstddef>

#include "kernels/bfloat16_packs.cuh"
#include "kernels/device_primitives.cuh"

namespace ladder {

constexpr int kLayernormThreads = 256;
constexpr int kLayernormWarps = kLayernormThreads / kWarpSize;

// Math:   v[r, :] = x[r, :], or with kAddResidual: residual[r, :] += x[r, :] and
//         v[r, :] = the new residual[r, :];
//         mean = sum_c v[r, c] / C;  var = sum_c (v[r, c] - mean)^2 / C;
//         out[r, c] = (v[r, c] - mean) * rsqrt(var + eps) * weight[c] + bias[c].
// Shapes: residual, x, out [rows, C]; weight, bias [C]; C % kWidth == 0,
//         C / kWidth <= kLayernormThreads * kPacksPerThread.
// Grid:   one block per row r; thread t holds packs t, t + 256, ... of
//         the row (at most kPacksPerThread) in registers, so the row is read once and
//         the sum written once; the statistics come from the registers.
// The body of the LayerNorm kernels (layernorm.cu) and of the persistent kernel's
// LayerNorm rows, for float or bf16 rows (bf16: widened to fp32 on
// load, every output rounded once on store, common/reference.hpp R3).
// `row_index` is the row this block normalizes; `wait_for_inputs()` is called once the
// LayerNorm's own parameters are requested and before x is read: a kernel boundary's
// wait_for_previous_kernel, or a persistent kernel's wait on the counters of what writes
// x (kernels/persistent_decode.cu). Every thread of the block must call it.
template <typename Element, int kWidth, int kPacksPerThread, bool kAddResidual, typename Wait>
__device__ __forceinline__ void normalize_row(int row_index, Element* residual, const Element* x,
                                              const Element* weight, const Element* bias,
                                              Element* out, int C, float eps,
                                              const Wait& wait_for_inputs) {
  __shared__ float partials[kLayernormWarps];
  const int packs = C / kWidth;
  const std::size_t row_offset = static_cast<std::size_t>(row_index) * C;
  const Element* x_row = x + row_offset;
  Element* residual_row = kAddResidual ? residual + row_offset : nullptr;

  // The LayerNorm's own parameters, which no kernel writes, are requested first; under a
  // programmatic launch (DecodeLaunch) before the wait for the kernel that writes x.
  PackedFloats<kWidth> weight_packs[kPacksPerThread];
  PackedFloats<kWidth> bias_packs[kPacksPerThread];
#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kLayernormThreads;
    if (i < packs) {
      weight_packs[k] = load_pack<kWidth>(weight, i);
      bias_packs[k] = load_pack<kWidth>(bias, i);
    }
  }
  wait_for_inputs();

  PackedFloats<kWidth> row[kPacksPerThread];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kLayernormThreads;
    if (i < packs) {
      row[k] = load_pack<kWidth>(x_row, i);
      if constexpr (kAddResidual) {
        const PackedFloats<kWidth> residual_pack = load_pack<kWidth>(residual_row, i);
#pragma unroll
        for (int j = 0; j < kWidth; ++j) row[k].values[j] += residual_pack.values[j];
        store_pack<kWidth>(residual_row, i, row[k]);
      }
#pragma unroll
      for (int j = 0; j < kWidth; ++j) sum += row[k].values[j];
    }
  }
  const float mean = block_sum<kLayernormWarps>(sum, partials) / static_cast<float>(C);

  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    if (threadIdx.x + k * kLayernormThreads < packs) {
#pragma unroll
      for (int j = 0; j < kWidth; ++j) {
        const float deviation = row[k].values[j] - mean;
        squares += deviation * deviation;
      }
    }
  }
  const float inverse_std =
      rsqrtf(block_sum<kLayernormWarps>(squares, partials) / static_cast<float>(C) + eps);

  Element* out_row = out + row_offset;
#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kLayernormThreads;
    if (i < packs) {
      PackedFloats<kWidth> result;
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        result.values[j] = (row[k].values[j] - mean) * inverse_std * weight_packs[k].values[j] +
                           bias_packs[k].values[j];
      store_pack<kWidth>(out_row, i, result);
    }
  }
}

}  // namespace ladder
