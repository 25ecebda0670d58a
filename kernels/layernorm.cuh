// kernels/layernorm.cuh - LayerNorm over the last dimension, alone or fused with the
// residual add that precedes it.
//
//   out[r, :] = (x[r, :] - mean_r) / sqrt(var_r + eps) * weight + bias
//
// with mean_r and the biased variance var_r taken over the C features of row r.
// Shapes: x, out [rows, C]; weight, bias [C]; fp32 row-major.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/kernel_limits.hpp"  // kMaxLayernormC
#include "kernels/launch_dependents.hpp"

namespace ladder {

/// LayerNorm of each of the `rows` rows of x into out (out may equal x: in place).
/// One block per row, the row in registers; two passes over it (mean, then the sum of
/// squared deviations) keep the variance accurate even when the mean is large.
/// `dependents`: when a programmatic dependent launched next (a decode matmul) may start
/// (LaunchDependents; every block lets it at its start unless kAtExit). `launch`: how
/// this launch waits for the kernel before it (DecodeLaunch; with kProgrammatic its
/// blocks load weight and bias, then wait for that kernel before they read x;
/// kernels/programmatic_launch.cuh says where it may be passed). The same bits either way.
/// Throws std::invalid_argument on a null pointer, rows, C <= 0, C > kMaxLayernormC,
/// or eps < 0 or not finite.
void launch_layernorm(const float* x, const float* weight, const float* bias, float* out, int rows,
                      int C, float eps, cudaStream_t stream,
                      LaunchDependents dependents = LaunchDependents::kAtStart,
                      DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

/// The residual add and the LayerNorm that follows it, fused: for each row r,
///   residual[r, :] += x[r, :];   out[r, :] = LayerNorm(residual[r, :]) (as above).
/// residual is [rows, C] in place (the residual stream); x [rows, C] is the branch output
/// being added (attention or MLP projection); out [rows, C] receives the normalized row,
/// the next matmul's input. Each row of residual and x is read once and each output
/// written once, in one launch; launch_residual_add then launch_layernorm read the
/// residual twice, in two launches. One block per row keeps the summed row in
/// registers. out may equal x, not residual. A programmatic dependent launched next may
/// start as the blocks start (LaunchDependents::kAtStart).
/// Throws std::invalid_argument on a null pointer, rows, C <= 0, C > kMaxLayernormC,
/// eps < 0 or not finite, or out == residual.
void launch_residual_layernorm(float* residual, const float* x, const float* weight,
                               const float* bias, float* out, int rows, int C, float eps,
                               cudaStream_t stream);

/// LayerNorm of the bf16 residual stream (common/reference.hpp, point R3):
///   out[r, :] = bf16((x[r, :] - mean_r) / sqrt(var_r + eps) * weight + bias),
/// x, out [rows, C] and weight, bias [C] bf16, the statistics in fp32 over the bf16
/// values, never stored. No fused residual add: in the bf16 step the residual add is
/// the matmul epilogue's (R6, launch_decode_matmul_bf16 with kBiasResidual), which
/// stores only the sum. One block per row as launch_layernorm; out may equal x;
/// `dependents` and `launch` as there. Throws std::invalid_argument as launch_layernorm.
void launch_layernorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                           const __nv_bfloat16* bias, __nv_bfloat16* out, int rows, int C,
                           float eps, cudaStream_t stream,
                           LaunchDependents dependents = LaunchDependents::kAtStart,
                           DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

}  // namespace ladder
