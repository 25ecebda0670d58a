// kernels/layernorm_bf16.cuh - LayerNorm of the bf16 residual stream (common/reference.hpp,
// point R3):
//
//   out[r, :] = bf16((x[r, :] - mean_r) / sqrt(var_r + eps) * weight + bias)
//
// x, out [rows, C] and weight, bias [C] in bf16; mean_r and the biased variance var_r are
// taken in fp32 over the bf16 values of row r and never stored. There is no fused
// residual add here: in the bf16 step the residual add happens in the matmul epilogue
// (R6, launch_decode_matmul_bf16 with kBiasResidual), which stores only the sum, so a
// LayerNorm reads the stream that epilogue left.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/kernel_limits.hpp"  // kMaxLayernormC

namespace ladder {

/// LayerNorm of each of the `rows` rows of x into out (out may equal x). One block per
/// row, the row in registers as fp32, two-pass statistics (as launch_layernorm).
/// Throws std::invalid_argument on a null pointer, rows, C <= 0, C > kMaxLayernormC,
/// or eps < 0 or not finite.
void launch_layernorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                           const __nv_bfloat16* bias, __nv_bfloat16* out, int rows, int C,
                           float eps, cudaStream_t stream);

}  // namespace ladder
