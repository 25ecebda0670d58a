// kernels/elementwise.cu - bias add, GELU (tanh approximation) and residual add.
//
// All three are grid-stride loops over packs of kWidth floats (4: one 16-byte access;
// 1: the scalar fallback for sizes not divisible by 4 or unaligned pointers).
#include "kernels/elementwise.cuh"

#include "common/cuda_check.hpp"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

constexpr int kElementwiseThreads = 256;

// Math:   x[r, c] += bias[c].
// Shapes: x [rows, columns], bias [columns]; columns % kWidth == 0.
// Grid:   a grid-stride loop over the rows * columns / kWidth packs of x; pack i lies in
//         columns kWidth * (i % (columns / kWidth)) onwards, which picks the bias pack.
// Promises (kWidth = 4): LDG.E.128 STG.E.128
template <int kWidth>
__global__ void add_bias_kernel(float* x, const float* bias, int rows, int columns) {
  const std::size_t packs_per_row = static_cast<std::size_t>(columns / kWidth);
  const std::size_t total = static_cast<std::size_t>(rows) * packs_per_row;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    PackedFloats<kWidth> v = load_packed<kWidth>(x, i);
    const PackedFloats<kWidth> b = load_packed<kWidth>(bias, i % packs_per_row);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) v.values[k] += b.values[k];
    store_packed<kWidth>(x, i, v);
  }
}

// Math:   out[i] = gelu(x[i]) (device_primitives.cuh); out may be x.
// Shapes: x, out [count] (any [rows, columns] flattened); count % kWidth == 0.
// Grid:   a grid-stride loop over the count / kWidth packs.
// Promises (kWidth = 4): LDG.E.128 STG.E.128
template <int kWidth>
__global__ void gelu_kernel(const float* x, float* out, std::size_t count) {
  const std::size_t packs = count / kWidth;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += stride) {
    PackedFloats<kWidth> v = load_packed<kWidth>(x, i);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) v.values[k] = gelu(v.values[k]);
    store_packed<kWidth>(out, i, v);
  }
}

// Math:   residual[i] += x[i].
// Shapes: residual, x [count]; count % kWidth == 0.
// Grid:   a grid-stride loop over the count / kWidth packs.
// Promises (kWidth = 4): LDG.E.128 STG.E.128
template <int kWidth>
__global__ void residual_add_kernel(float* residual, const float* x, std::size_t count) {
  const std::size_t packs = count / kWidth;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += stride) {
    PackedFloats<kWidth> r = load_packed<kWidth>(residual, i);
    const PackedFloats<kWidth> v = load_packed<kWidth>(x, i);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) r.values[k] += v.values[k];
    store_packed<kWidth>(residual, i, r);
  }
}

void check_shape(const char* launcher, int rows, int columns) {
  launch_checks::require_positive(launcher, {{"rows", rows}, {"columns", columns}});
}

}  // namespace

void launch_add_bias(float* x, const float* bias, int rows, int columns, cudaStream_t stream) {
  constexpr const char* kName = "launch_add_bias";
  launch_checks::require_not_null(kName, {{"x", x}, {"bias", bias}});
  check_shape(kName, rows, columns);
  const bool packed = columns % 4 == 0 && launch_checks::is_16_byte_aligned(x) &&
                      launch_checks::is_16_byte_aligned(bias);
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(columns);
  with_width(packed, [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    const unsigned int blocks =
        launch_checks::grid_stride_blocks(count / kWidth, kElementwiseThreads);
    add_bias_kernel<kWidth><<<blocks, kElementwiseThreads, 0, stream>>>(x, bias, rows, columns);
  });
  CUDA_CHECK_LAUNCH(stream);
}

void launch_gelu(const float* x, float* out, int rows, int columns, cudaStream_t stream) {
  constexpr const char* kName = "launch_gelu";
  launch_checks::require_not_null(kName, {{"x", x}, {"out", out}});
  check_shape(kName, rows, columns);
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(columns);
  const bool packed = count % 4 == 0 && launch_checks::is_16_byte_aligned(x) &&
                      launch_checks::is_16_byte_aligned(out);
  with_width(packed, [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    const unsigned int blocks =
        launch_checks::grid_stride_blocks(count / kWidth, kElementwiseThreads);
    gelu_kernel<kWidth><<<blocks, kElementwiseThreads, 0, stream>>>(x, out, count);
  });
  CUDA_CHECK_LAUNCH(stream);
}

void launch_residual_add(float* residual, const float* x, int rows, int columns,
                         cudaStream_t stream) {
  constexpr const char* kName = "launch_residual_add";
  launch_checks::require_not_null(kName, {{"residual", residual}, {"x", x}});
  check_shape(kName, rows, columns);
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(columns);
  const bool packed = count % 4 == 0 && launch_checks::is_16_byte_aligned(residual) &&
                      launch_checks::is_16_byte_aligned(x);
  with_width(packed, [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    const unsigned int blocks =
        launch_checks::grid_stride_blocks(count / kWidth, kElementwiseThreads);
    residual_add_kernel<kWidth><<<blocks, kElementwiseThreads, 0, stream>>>(residual, x, count);
  });
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
