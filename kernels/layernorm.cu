// kernels/layernorm.cu - LayerNorm, residual add + LayerNorm fused, and LayerNorm of a
// bf16 row: one row body, one block per row, the row held in registers (fp32), two-pass
// statistics.
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
#include "kernels/bfloat16_packs.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"
#include "kernels/programmatic_launch.cuh"

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
// The body of both kernels below, for float or bf16 rows (bf16: widened to fp32 on
// load, every output rounded once on store, common/reference.hpp R3).
template <typename Element, int kWidth, int kPacksPerThread, bool kAddResidual>
__device__ __forceinline__ void normalize_row(Element* residual, const Element* x,
                                              const Element* weight, const Element* bias,
                                              Element* out, int C, float eps,
                                              LaunchDependents dependents) {
  // The next decode matmul may start streaming its weight now (device_primitives.cuh):
  // in a decode step this grid is B <= 64 blocks, all resident at once, and the matmul's
  // blocks fill the SMs they leave free.
  launch_dependents_at_start(dependents);
  __shared__ float partials[kLayernormWarps];
  const int packs = C / kWidth;
  const std::size_t row_offset = static_cast<std::size_t>(blockIdx.x) * C;
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
  wait_for_previous_kernel();  // at once for a plain launch

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

// Promises (kWidth = 4): LDG.E.128<ACQBULK STG.E.128 PREEXIT
template <int kWidth, int kPacksPerThread, bool kAddResidual>
__global__ void __launch_bounds__(kLayernormThreads)
    layernorm_row_kernel(float* residual, const float* x, const float* weight, const float* bias,
                         float* out, int C, float eps, LaunchDependents dependents) {
  normalize_row<float, kWidth, kPacksPerThread, kAddResidual>(residual, x, weight, bias, out, C,
                                                              eps, dependents);
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
  normalize_row<__nv_bfloat16, kWidth, kPacksPerThread, false>(nullptr, x, weight, bias, out, C,
                                                               eps, dependents);
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
