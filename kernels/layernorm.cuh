// kernels/layernorm.cuh - LayerNorm over the last dimension.
//
//   out[r, :] = (x[r, :] - mean_r) / sqrt(var_r + eps) * weight + bias
//
// with mean_r and the biased variance var_r taken over the C features of row r.
// Shapes: x, out [rows, C]; weight, bias [C]; fp32 row-major.
#pragma once

#include <cuda_runtime.h>

namespace ladder {

/// LayerNorm of each of the `rows` rows of x into out (out may equal x: in place).
/// One warp per row; two passes over the row (mean, then the sum of squared
/// deviations) keep the variance accurate even when the mean is large.
/// Throws std::invalid_argument on a null pointer, rows, C <= 0, or eps < 0 or not finite.
void launch_layernorm(const float* x, const float* weight, const float* bias, float* out, int rows,
                      int C, float eps, cudaStream_t stream);

}  // namespace ladder
