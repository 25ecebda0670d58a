// kernels/layernorm_bf16.cu - LayerNorm in bf16: one block of 128 threads per row, each
// thread one 16-byte pack of 8 bf16 (C = 768 is 96 packs), widened to fp32 in registers;
// two-pass statistics in fp32 for the reason layernorm.cu gives; one rounding per output.
#include "kernels/layernorm_bf16.cuh"

#include <cmath>
#include <string>

#include "common/cuda_check.hpp"
#include "kernels/bfloat16_packs.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;

// Math:   mean = sum_c x[r, c] / C;  var = sum_c (x[r, c] - mean)^2 / C  (fp32);
//         out[r, c] = bf16((x[r, c] - mean) * rsqrt(var + eps) * weight[c] + bias[c]).
// Shapes: x, out [rows, C]; weight, bias [C]; bf16; C % kWidth == 0,
//         C / kWidth <= kThreads * kPacksPerThread.
// Grid:   one block per row (blockIdx.x = r); thread t holds packs t, t + 128, ... of the
//         row (at most kPacksPerThread) in registers, so the row is read once.
// Promises (kWidth = 8): LDG.E.128 STG.E.128
template <int kWidth, int kPacksPerThread>
__global__ void __launch_bounds__(kThreads)
    layernorm_bf16_kernel(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                          const __nv_bfloat16* bias, __nv_bfloat16* out, int C, float eps) {
  __shared__ float partials[kWarps];
  const int packs = C / kWidth;
  const std::size_t row_offset = static_cast<std::size_t>(blockIdx.x) * C;

  PackedFloats<kWidth> row[kPacksPerThread];
  PackedFloats<kWidth> weight_packs[kPacksPerThread];
  PackedFloats<kWidth> bias_packs[kPacksPerThread];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < packs) {
      row[k] = load_bfloat16_pack<kWidth>(x + row_offset, i);
      weight_packs[k] = load_bfloat16_pack<kWidth>(weight, i);
      bias_packs[k] = load_bfloat16_pack<kWidth>(bias, i);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) sum += row[k].values[j];
    }
  }
  const float mean = block_sum<kWarps>(sum, partials) / static_cast<float>(C);

  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    if (threadIdx.x + k * kThreads < packs) {
#pragma unroll
      for (int j = 0; j < kWidth; ++j) {
        const float deviation = row[k].values[j] - mean;
        squares += deviation * deviation;
      }
    }
  }
  const float inverse_std =
      rsqrtf(block_sum<kWarps>(squares, partials) / static_cast<float>(C) + eps);

#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < packs) {
      PackedFloats<kWidth> result;
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        result.values[j] = (row[k].values[j] - mean) * inverse_std * weight_packs[k].values[j] +
                           bias_packs[k].values[j];
      store_bfloat16_pack<kWidth>(out + row_offset, i, result);
    }
  }
}

}  // namespace

void launch_layernorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                           const __nv_bfloat16* bias, __nv_bfloat16* out, int rows, int C,
                           float eps, cudaStream_t stream) {
  constexpr const char* kName = "launch_layernorm_bf16";
  launch_checks::require_not_null(kName,
                                  {{"x", x}, {"weight", weight}, {"bias", bias}, {"out", out}});
  launch_checks::require_positive(kName, {{"rows", rows}, {"C", C}});
  launch_checks::require(std::isfinite(eps) && eps >= 0.0f, kName, "eps must be finite and >= 0");
  if (C > kMaxLayernormC)
    launch_checks::fail(kName, "C (" + std::to_string(C) + ") exceeds " +
                                   std::to_string(kMaxLayernormC) +
                                   ", the longest row a block keeps in registers");
  const bool packed = C % kBfloatPack == 0 && launch_checks::is_16_byte_aligned(x) &&
                      launch_checks::is_16_byte_aligned(weight) &&
                      launch_checks::is_16_byte_aligned(bias) &&
                      launch_checks::is_16_byte_aligned(out);
  const auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned int>(rows), kThreads, 0, stream>>>(x, weight, bias, out, C, eps);
  };
  static_assert(kThreads * 16 >= kMaxLayernormC, "the scalar path covers every C");
  const int packs_per_thread = (C / (packed ? kBfloatPack : 1) + kThreads - 1) / kThreads;
  if (packed) {
    if (packs_per_thread <= 1) {
      launch(layernorm_bf16_kernel<kBfloatPack, 1>);
    } else {
      launch(layernorm_bf16_kernel<kBfloatPack, 2>);  // C <= 2048 = kMaxLayernormC
    }
  } else if (packs_per_thread <= 2) {
    launch(layernorm_bf16_kernel<1, 2>);
  } else if (packs_per_thread <= 4) {
    launch(layernorm_bf16_kernel<1, 4>);
  } else if (packs_per_thread <= 8) {
    launch(layernorm_bf16_kernel<1, 8>);
  } else {
    launch(layernorm_bf16_kernel<1, 16>);
  }
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
