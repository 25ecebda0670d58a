// kernels/layernorm.cu - LayerNorm, and residual add + LayerNorm fused; one warp per
// row, two-pass statistics.
//
// A row of GPT-2 small is 768 floats (3 KiB): one warp reads it three times (sum,
// squared deviations, output), and the second and third reads come from L1. Two
// passes instead of sum and sum of squares in one: E[x^2] - E[x]^2 cancels badly in
// fp32 when the mean is large against the spread, while sum((x - mean)^2) does not.
// The fused kernel keeps the summed row in registers instead (24 floats per lane at
// C = 768), so its second and third passes read no memory at all.
#include "kernels/layernorm.cuh"

#include <cmath>
#include <string>

#include "common/cuda_check.hpp"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

constexpr int kLayernormRowsPerBlock = 8;  // one warp per row
constexpr int kLayernormThreads = kLayernormRowsPerBlock * kWarpSize;

// Math:   mean = sum_c x[r, c] / C;  var = sum_c (x[r, c] - mean)^2 / C;
//         out[r, c] = (x[r, c] - mean) * rsqrt(var + eps) * weight[c] + bias[c].
// Shapes: x, out [rows, C]; weight, bias [C]; C % kWidth == 0.
// Grid:   blocks of kLayernormRowsPerBlock warps; warp w of block b normalizes row
//         b * kLayernormRowsPerBlock + w; lane l handles packs l, l + 32, ... of the row.
template <int kWidth>
__global__ void layernorm_kernel(const float* x, const float* weight, const float* bias, float* out,
                                 int rows, int C, float eps) {
  const int row = blockIdx.x * kLayernormRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;  // whole warps leave together; no block-wide barrier follows
  const int packs = C / kWidth;
  const float* x_row = x + static_cast<std::size_t>(row) * C;
  float* out_row = out + static_cast<std::size_t>(row) * C;

  float sum = 0.0f;
  for (int i = lane; i < packs; i += kWarpSize) {
    const PackedFloats<kWidth> v = load_packed<kWidth>(x_row, i);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum += v.values[k];
  }
  const float mean = warp_sum(sum) / static_cast<float>(C);

  float squares = 0.0f;
  for (int i = lane; i < packs; i += kWarpSize) {
    const PackedFloats<kWidth> v = load_packed<kWidth>(x_row, i);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float deviation = v.values[k] - mean;
      squares += deviation * deviation;
    }
  }
  const float inverse_std = rsqrtf(warp_sum(squares) / static_cast<float>(C) + eps);

  for (int i = lane; i < packs; i += kWarpSize) {
    const PackedFloats<kWidth> v = load_packed<kWidth>(x_row, i);
    const PackedFloats<kWidth> w = load_packed<kWidth>(weight, i);
    const PackedFloats<kWidth> b = load_packed<kWidth>(bias, i);
    PackedFloats<kWidth> result;
#pragma unroll
    for (int k = 0; k < kWidth; ++k)
      result.values[k] = (v.values[k] - mean) * inverse_std * w.values[k] + b.values[k];
    store_packed<kWidth>(out_row, i, result);
  }
}

// Math:   residual[r, c] += x[r, c]; then out[r, :] is the LayerNorm of the new
//         residual[r, :], exactly as layernorm_kernel computes it (two-pass variance).
// Shapes: residual, x, out [rows, C]; weight, bias [C]; C % kWidth == 0 and
//         C / kWidth <= kWarpSize * kPacksPerLane.
// Grid:   one warp per row, as layernorm_kernel; lane l holds packs l, l + 32, ...
//         of the summed row in registers (at most kPacksPerLane of them), so each row
//         of residual and x is read once, the sum is written once, and the statistics
//         and the output are computed from the registers.
template <int kWidth, int kPacksPerLane>
__global__ void residual_layernorm_kernel(float* residual, const float* x, const float* weight,
                                          const float* bias, float* out, int rows, int C,
                                          float eps) {
  const int row = blockIdx.x * kLayernormRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;  // whole warps leave together; no block-wide barrier follows
  const int packs = C / kWidth;
  float* residual_row = residual + static_cast<std::size_t>(row) * C;
  const float* x_row = x + static_cast<std::size_t>(row) * C;
  float* out_row = out + static_cast<std::size_t>(row) * C;

  PackedFloats<kWidth> summed[kPacksPerLane];  // pack k is pack lane + 32 k of the row
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k) {
    const int i = lane + k * kWarpSize;
    if (i < packs) {
      summed[k] = load_packed<kWidth>(residual_row, i);
      const PackedFloats<kWidth> branch = load_packed<kWidth>(x_row, i);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) {
        summed[k].values[j] += branch.values[j];
        sum += summed[k].values[j];
      }
      store_packed<kWidth>(residual_row, i, summed[k]);
    }
  }
  const float mean = warp_sum(sum) / static_cast<float>(C);

  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k) {
    if (lane + k * kWarpSize < packs) {
#pragma unroll
      for (int j = 0; j < kWidth; ++j) {
        const float deviation = summed[k].values[j] - mean;
        squares += deviation * deviation;
      }
    }
  }
  const float inverse_std = rsqrtf(warp_sum(squares) / static_cast<float>(C) + eps);

#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k) {
    const int i = lane + k * kWarpSize;
    if (i < packs) {
      const PackedFloats<kWidth> w = load_packed<kWidth>(weight, i);
      const PackedFloats<kWidth> b = load_packed<kWidth>(bias, i);
      PackedFloats<kWidth> result;
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        result.values[j] = (summed[k].values[j] - mean) * inverse_std * w.values[j] + b.values[j];
      store_packed<kWidth>(out_row, i, result);
    }
  }
}

void check_layernorm_arguments(const char* launcher, const float* weight, const float* bias,
                               float* out, int rows, int C, float eps) {
  launch_checks::require_not_null(launcher, "weight", weight);
  launch_checks::require_not_null(launcher, "bias", bias);
  launch_checks::require_not_null(launcher, "out", out);
  launch_checks::require_positive(launcher, "rows", rows);
  launch_checks::require_positive(launcher, "C", C);
  launch_checks::require(std::isfinite(eps) && eps >= 0.0f, launcher,
                         "eps must be finite and >= 0");
}

unsigned int layernorm_blocks(int rows) {
  return static_cast<unsigned int>((rows + kLayernormRowsPerBlock - 1) / kLayernormRowsPerBlock);
}

}  // namespace

void launch_layernorm(const float* x, const float* weight, const float* bias, float* out, int rows,
                      int C, float eps, cudaStream_t stream) {
  constexpr const char* kName = "launch_layernorm";
  launch_checks::require_not_null(kName, "x", x);
  check_layernorm_arguments(kName, weight, bias, out, rows, C, eps);

  const unsigned int blocks = layernorm_blocks(rows);
  const bool packed = C % 4 == 0 && launch_checks::is_16_byte_aligned(x) &&
                      launch_checks::is_16_byte_aligned(weight) &&
                      launch_checks::is_16_byte_aligned(bias) &&
                      launch_checks::is_16_byte_aligned(out);
  if (packed) {
    layernorm_kernel<4>
        <<<blocks, kLayernormThreads, 0, stream>>>(x, weight, bias, out, rows, C, eps);
  } else {
    layernorm_kernel<1>
        <<<blocks, kLayernormThreads, 0, stream>>>(x, weight, bias, out, rows, C, eps);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_residual_layernorm(float* residual, const float* x, const float* weight,
                               const float* bias, float* out, int rows, int C, float eps,
                               cudaStream_t stream) {
  constexpr const char* kName = "launch_residual_layernorm";
  launch_checks::require_not_null(kName, "residual", residual);
  launch_checks::require_not_null(kName, "x", x);
  check_layernorm_arguments(kName, weight, bias, out, rows, C, eps);
  launch_checks::require(out != residual, kName,
                         "out must not be residual (residual keeps the sum, out its LayerNorm)");
  if (C > kMaxResidualLayernormC)
    launch_checks::fail(kName, "C (" + std::to_string(C) + ") exceeds " +
                                   std::to_string(kMaxResidualLayernormC) +
                                   ", the longest row a warp keeps in registers");

  const unsigned int blocks = layernorm_blocks(rows);
  const bool packed =
      C % 4 == 0 && launch_checks::is_16_byte_aligned(residual) &&
      launch_checks::is_16_byte_aligned(x) && launch_checks::is_16_byte_aligned(weight) &&
      launch_checks::is_16_byte_aligned(bias) && launch_checks::is_16_byte_aligned(out);
  // The fewest registers that hold the row: packs per lane = ceil(C / kWidth / 32).
  static_assert(kWarpSize * 4 * 16 == kMaxResidualLayernormC, "packed path covers every C");
  static_assert(kWarpSize * 1 * 64 == kMaxResidualLayernormC, "scalar path covers every C");
  if (packed && C <= kWarpSize * 4 * 8) {
    residual_layernorm_kernel<4, 8>
        <<<blocks, kLayernormThreads, 0, stream>>>(residual, x, weight, bias, out, rows, C, eps);
  } else if (packed) {
    residual_layernorm_kernel<4, 16>
        <<<blocks, kLayernormThreads, 0, stream>>>(residual, x, weight, bias, out, rows, C, eps);
  } else if (C <= kWarpSize * 8) {
    residual_layernorm_kernel<1, 8>
        <<<blocks, kLayernormThreads, 0, stream>>>(residual, x, weight, bias, out, rows, C, eps);
  } else {
    residual_layernorm_kernel<1, 64>
        <<<blocks, kLayernormThreads, 0, stream>>>(residual, x, weight, bias, out, rows, C, eps);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace ladder
