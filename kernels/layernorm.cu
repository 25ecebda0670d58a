// kernels/layernorm.cu - LayerNorm, one warp per row, two-pass statistics.
//
// A row of GPT-2 small is 768 floats (3 KiB): one warp reads it three times (sum,
// squared deviations, output), and the second and third reads come from L1. Two
// passes instead of sum and sum of squares in one: E[x^2] - E[x]^2 cancels badly in
// fp32 when the mean is large against the spread, while sum((x - mean)^2) does not.
#include "kernels/layernorm.cuh"

#include <cmath>

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

}  // namespace

void launch_layernorm(const float* x, const float* weight, const float* bias, float* out, int rows,
                      int C, float eps, cudaStream_t stream) {
  constexpr const char* kName = "launch_layernorm";
  launch_checks::require_not_null(kName, "x", x);
  launch_checks::require_not_null(kName, "weight", weight);
  launch_checks::require_not_null(kName, "bias", bias);
  launch_checks::require_not_null(kName, "out", out);
  launch_checks::require_positive(kName, "rows", rows);
  launch_checks::require_positive(kName, "C", C);
  launch_checks::require(std::isfinite(eps) && eps >= 0.0f, kName, "eps must be finite and >= 0");

  const unsigned int blocks =
      static_cast<unsigned int>((rows + kLayernormRowsPerBlock - 1) / kLayernormRowsPerBlock);
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

}  // namespace ladder
