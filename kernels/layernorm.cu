// kernels/layernorm.cu - LayerNorm, and residual add + LayerNorm fused: one kernel
// template, one block per row, the row held in registers, two-pass statistics.
//
// A decode step normalizes only B rows (32 at the default batch), so a row is the unit
// of parallelism: one block of 256 threads per row, each thread one 16-byte pack of it
// (C = 768 is 192 packs). Every load of the row, the weight and the bias is issued at
// once, before the first reduction (the warp-per-row version it replaced, and what
// each took: docs/performance_notes.md). Two passes instead of sum and sum of squares in one:
// E[x^2] - E[x]^2 cancels badly in fp32 when the mean is large against the spread,
// while sum((x - mean)^2) does not; both passes read the registers, not memory.
#include "kernels/layernorm.cuh"

#include <cmath>
#include <string>

#include "common/cuda_check.hpp"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

constexpr int kLayernormThreads = 256;
constexpr int kLayernormWarps = kLayernormThreads / kWarpSize;

// Math:   v[r, :] = x[r, :], or with kAddResidual: residual[r, :] += x[r, :] and
//         v[r, :] = the new residual[r, :];
//         mean = sum_c v[r, c] / C;  var = sum_c (v[r, c] - mean)^2 / C;
//         out[r, c] = (v[r, c] - mean) * rsqrt(var + eps) * weight[c] + bias[c].
// Shapes: residual, x, out [rows, C]; weight, bias [C]; C % kWidth == 0,
//         C / kWidth <= kLayernormThreads * kPacksPerThread.
// Grid:   one block per row (blockIdx.x = r); thread t holds packs t, t + 256, ... of
//         the row (at most kPacksPerThread) in registers, so the row is read once and
//         the sum written once; the statistics come from the registers.
// Promises (kWidth = 4): LDG.E.128 STG.E.128
template <int kWidth, int kPacksPerThread, bool kAddResidual>
__global__ void __launch_bounds__(kLayernormThreads)
    layernorm_row_kernel(float* residual, const float* x, const float* weight, const float* bias,
                         float* out, int C, float eps) {
  __shared__ float partials[kLayernormWarps];
  const int packs = C / kWidth;
  const std::size_t row_offset = static_cast<std::size_t>(blockIdx.x) * C;
  const float* x_row = x + row_offset;
  float* residual_row = kAddResidual ? residual + row_offset : nullptr;

  PackedFloats<kWidth> row[kPacksPerThread];
  PackedFloats<kWidth> weight_packs[kPacksPerThread];
  PackedFloats<kWidth> bias_packs[kPacksPerThread];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kLayernormThreads;
    if (i < packs) {
      row[k] = load_packed<kWidth>(x_row, i);
      weight_packs[k] = load_packed<kWidth>(weight, i);
      bias_packs[k] = load_packed<kWidth>(bias, i);
      if constexpr (kAddResidual) {
        const PackedFloats<kWidth> residual_pack = load_packed<kWidth>(residual_row, i);
#pragma unroll
        for (int j = 0; j < kWidth; ++j) row[k].values[j] += residual_pack.values[j];
        store_packed<kWidth>(residual_row, i, row[k]);
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

  float* out_row = out + row_offset;
#pragma unroll
  for (int k = 0; k < kPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kLayernormThreads;
    if (i < packs) {
      PackedFloats<kWidth> result;
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        result.values[j] = (row[k].values[j] - mean) * inverse_std * weight_packs[k].values[j] +
                           bias_packs[k].values[j];
      store_packed<kWidth>(out_row, i, result);
    }
  }
}

/// Launches layernorm_row_kernel with the fewest registers that hold a row of C:
/// kPacksPerThread = ceil(C / kWidth / 256), rounded up to 1, 2, 4 or 8.
template <bool kAddResidual>
void launch_row_kernel(float* residual, const float* x, const float* weight, const float* bias,
                       float* out, int rows, int C, float eps, bool packed, cudaStream_t stream) {
  static_assert(kLayernormThreads * 1 * 8 == kMaxLayernormC, "the scalar path covers every C");
  const auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned int>(rows), kLayernormThreads, 0, stream>>>(residual, x, weight,
                                                                              bias, out, C, eps);
  };
  const int width = packed ? 4 : 1;
  const int packs_per_thread = (C / width + kLayernormThreads - 1) / kLayernormThreads;
  if (packed) {
    if (packs_per_thread <= 1) {
      launch(layernorm_row_kernel<4, 1, kAddResidual>);
    } else {
      launch(layernorm_row_kernel<4, 2, kAddResidual>);  // C <= 2048 = kMaxLayernormC
    }
  } else if (packs_per_thread <= 1) {
    launch(layernorm_row_kernel<1, 1, kAddResidual>);
  } else if (packs_per_thread <= 2) {
    launch(layernorm_row_kernel<1, 2, kAddResidual>);
  } else if (packs_per_thread <= 4) {
    launch(layernorm_row_kernel<1, 4, kAddResidual>);
  } else {
    launch(layernorm_row_kernel<1, 8, kAddResidual>);
  }
  CUDA_CHECK_LAUNCH(stream);
}

void check_layernorm_arguments(const char* launcher, const float* weight, const float* bias,
                               float* out, int rows, int C, float eps) {
  launch_checks::require_not_null(launcher, {{"weight", weight}, {"bias", bias}, {"out", out}});
  launch_checks::require_positive(launcher, {{"rows", rows}, {"C", C}});
  launch_checks::require(std::isfinite(eps) && eps >= 0.0f, launcher,
                         "eps must be finite and >= 0");
  if (C > kMaxLayernormC)
    launch_checks::fail(launcher, "C (" + std::to_string(C) + ") exceeds " +
                                      std::to_string(kMaxLayernormC) +
                                      ", the longest row a block keeps in registers");
}

}  // namespace

void launch_layernorm(const float* x, const float* weight, const float* bias, float* out, int rows,
                      int C, float eps, cudaStream_t stream) {
  constexpr const char* kName = "launch_layernorm";
  launch_checks::require_not_null(kName, "x", x);
  check_layernorm_arguments(kName, weight, bias, out, rows, C, eps);
  const bool packed = C % 4 == 0 && launch_checks::is_16_byte_aligned(x) &&
                      launch_checks::is_16_byte_aligned(weight) &&
                      launch_checks::is_16_byte_aligned(bias) &&
                      launch_checks::is_16_byte_aligned(out);
  launch_row_kernel</*kAddResidual=*/false>(nullptr, x, weight, bias, out, rows, C, eps, packed,
                                            stream);
}

void launch_residual_layernorm(float* residual, const float* x, const float* weight,
                               const float* bias, float* out, int rows, int C, float eps,
                               cudaStream_t stream) {
  constexpr const char* kName = "launch_residual_layernorm";
  launch_checks::require_not_null(kName, {{"residual", residual}, {"x", x}});
  check_layernorm_arguments(kName, weight, bias, out, rows, C, eps);
  launch_checks::require(out != residual, kName,
                         "out must not be residual (residual keeps the sum, out its LayerNorm)");
  const bool packed =
      C % 4 == 0 && launch_checks::is_16_byte_aligned(residual) &&
      launch_checks::is_16_byte_aligned(x) && launch_checks::is_16_byte_aligned(weight) &&
      launch_checks::is_16_byte_aligned(bias) && launch_checks::is_16_byte_aligned(out);
  launch_row_kernel</*kAddResidual=*/true>(residual, x, weight, bias, out, rows, C, eps, packed,
                                           stream);
}

}  // namespace ladder
