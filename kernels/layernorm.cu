// kernels/layernorm.cu - LayerNorm, residual add + LayerNorm fused, and LayerNorm of a
// bf16 row: one row body, one block per row, the row held in registers (fp32), two-pass
// statistics.
//
// A decode step normalizes only B rows (32 at the default batch), so a row is the unit
// of parallelism: one block of 256 threads per row, each thread one 16-byte pack of it
// (C = 768 is 192 packs). Every load of the row, the weight and the bias is issued at
// once, before the first reduction (bench/layernorm_history runs the warp-per-row
// version it replaced beside it). Two passes instead of sum and sum of squares in one:
// E[x^2] - E[x]^2 cancels badly in fp32 when the mean is large against the spread,
// while sum((x - mean)^2) does not; both passes read the registers, not memory.
#include "kernels/layernorm.cuh"

#include <cmath>
#include <string>

#include "common/cuda_check.hpp"
#include "kernels/bfloat16_packs.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"
#include "kernels/layernorm_row.cuh"
#include "kernels/programmatic_launch.cuh"

namespace ladder {

namespace {

// Promises (kWidth = 4): LDG.E.128<ACQBULK STG.E.128 PREEXIT
template <int kWidth, int kPacksPerThread, bool kAddResidual>
__global__ void __launch_bounds__(kLayernormThreads)
    layernorm_row_kernel(float* residual, const float* x, const float* weight, const float* bias,
                         float* out, int C, float eps, LaunchDependents dependents) {
  // The next decode matmul may start streaming its weight now (device_primitives.cuh):
  // in a decode step this grid is B <= 64 blocks, all resident at once, and the matmul's
  // blocks fill the SMs they leave free.
  launch_dependents_at_start(dependents);
  normalize_row<float, kWidth, kPacksPerThread, kAddResidual>(
      static_cast<int>(blockIdx.x), residual, x, weight, bias, out, C, eps,
      [] { wait_for_previous_kernel(); });  // at once for a plain launch
}

// Math:   as layernorm_row_kernel without the residual, on the bf16 residual stream:
//         out[r, c] = bf16((x[r, c] - mean) * rsqrt(var + eps) * weight[c] + bias[c]),
//         mean and var in fp32 over the bf16 row (R3).
// Shapes: x, out [rows, C]; weight, bias [C]; bf16; C % kWidth == 0 (8 bf16 a pack).
// Grid:   as layernorm_row_kernel: one block per row, C = 768 is 96 packs of 16 bytes.
// Promises (kWidth = 8): LDG.E.128<ACQBULK STG.E.128 PREEXIT
template <int kWidth, int kPacksPerThread>
__global__ void __launch_bounds__(kLayernormThreads)
    layernorm_bf16_kernel(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                          const __nv_bfloat16* bias, __nv_bfloat16* out, int C, float eps,
                          LaunchDependents dependents) {
  launch_dependents_at_start(dependents);
  normalize_row<__nv_bfloat16, kWidth, kPacksPerThread, false>(
      static_cast<int>(blockIdx.x), nullptr, x, weight, bias, out, C, eps,
      [] { wait_for_previous_kernel(); });
}

/// Launches layernorm_row_kernel with the fewest registers that hold a row of C:
/// kPacksPerThread = ceil(C / kWidth / 256), rounded up to 1, 2, 4 or 8.
template <bool kAddResidual>
void launch_row_kernel(float* residual, const float* x, const float* weight, const float* bias,
                       float* out, int rows, int C, float eps, bool packed, cudaStream_t stream,
                       LaunchDependents dependents, DecodeLaunch decode_launch) {
  static_assert(kLayernormThreads * 1 * 8 == kMaxLayernormC, "the scalar path covers every C");
  const auto launch = [&](auto kernel) {
    launch_between_products(decode_launch, kernel, dim3(static_cast<unsigned int>(rows)),
                            dim3(kLayernormThreads), 0, stream, residual, x, weight, bias, out, C,
                            eps, dependents);
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

void check_layernorm_arguments(const char* launcher, const void* weight, const void* bias,
                               const void* out, int rows, int C, float eps) {
  launch_checks::require_not_null(launcher, {{"weight", weight}, {"bias", bias}, {"out", out}});
  launch_checks::require_positive(launcher, {{"rows", rows}, {"C", C}});
  launch_checks::require(std::isfinite(eps) && eps >= 0.0f, launcher,
                         "eps must be finite and >= 0");
  launch_checks::require_at_most(launcher, "C", C, kMaxLayernormC,
                                 "the longest row a block keeps in registers (kMaxLayernormC)");
}

}  // namespace

void launch_layernorm(const float* x, const float* weight, const float* bias, float* out, int rows,
                      int C, float eps, cudaStream_t stream, LaunchDependents dependents,
                      DecodeLaunch launch) {
  constexpr const char* kName = "launch_layernorm";
  launch_checks::require_not_null(kName, "x", x);
  check_layernorm_arguments(kName, weight, bias, out, rows, C, eps);
  const bool packed = C % 4 == 0 && launch_checks::is_16_byte_aligned(x) &&
                      launch_checks::is_16_byte_aligned(weight) &&
                      launch_checks::is_16_byte_aligned(bias) &&
                      launch_checks::is_16_byte_aligned(out);
  launch_row_kernel</*kAddResidual=*/false>(nullptr, x, weight, bias, out, rows, C, eps, packed,
                                            stream, dependents, launch);
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
                                           stream, LaunchDependents::kAtStart,
                                           DecodeLaunch::kAfterPrevious);
}

void launch_layernorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                           const __nv_bfloat16* bias, __nv_bfloat16* out, int rows, int C,
                           float eps, cudaStream_t stream, LaunchDependents dependents,
                           DecodeLaunch decode_launch) {
  constexpr const char* kName = "launch_layernorm_bf16";
  launch_checks::require_not_null(kName, "x", x);
  check_layernorm_arguments(kName, weight, bias, out, rows, C, eps);
  const bool packed = C % kBfloatPack == 0 && launch_checks::is_16_byte_aligned(x) &&
                      launch_checks::is_16_byte_aligned(weight) &&
                      launch_checks::is_16_byte_aligned(bias) &&
                      launch_checks::is_16_byte_aligned(out);
  const auto launch = [&](auto kernel) {
    launch_between_products(decode_launch, kernel, dim3(static_cast<unsigned int>(rows)),
                            dim3(kLayernormThreads), 0, stream, x, weight, bias, out, C, eps,
                            dependents);
  };
  // C <= 2048 = kMaxLayernormC: one pack of 8 per thread, or up to 8 single values.
  const int packs_per_thread = (C + kLayernormThreads - 1) / kLayernormThreads;
  if (packed) {
    launch(layernorm_bf16_kernel<kBfloatPack, 1>);
  } else if (packs_per_thread <= 2) {
    launch(layernorm_bf16_kernel<1, 2>);
  } else if (packs_per_thread <= 4) {
    launch(layernorm_bf16_kernel<1, 4>);
  } else {
    launch(layernorm_bf16_kernel<1, 8>);
  }
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
