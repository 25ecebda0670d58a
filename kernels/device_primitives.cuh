// kernels/device_primitives.cuh - device building blocks shared by the kernel families:
// warp-wide and block-wide reductions by register shuffles, packed float access (one 16-byte load
// or store instead of four 4-byte ones), GPT-2's GELU, and grid dependency control (what a
// programmatic dependent launch waits for, and when the kernel before lets it start).
#pragma once

#include <cstddef>
#include <type_traits>

#include "kernels/launch_dependents.hpp"

namespace ladder {

constexpr int kWarpSize = 32;
constexpr unsigned int kFullWarpMask = 0xffffffffu;

/// Sum of `value` over the 32 lanes of a warp; every lane receives the same result
/// (a butterfly: each step adds the same two partial sums on both partner lanes).
__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(kFullWarpMask, value, offset);
  return value;
}

/// Maximum of `value` over the 32 lanes of a warp; every lane receives the result.
__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(kFullWarpMask, value, offset));
  return value;
}

/// Sum of `value` over the kWarps warps of a block; every thread receives the same
/// result, added in warp order (the same order on every run). `partials` is kWarps floats
/// of shared memory, free again on return.
template <int kWarps>
__device__ __forceinline__ float block_sum(float value, float* partials) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  value = warp_sum(value);
  if (lane == 0) partials[warp] = value;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += partials[w];
  __syncthreads();  // everyone has read partials before the next call overwrites them
  return total;
}

// sqrt(2 / pi) and the cubic coefficient of GPT-2's GELU (as in Hugging Face's NewGELU).
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

/// GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
/// One definition for every kernel that applies it (the elementwise GELU, the decode
/// matmuls' epilogue), so they agree bit for bit.
__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
}

/// kWidth consecutive floats moved as one unit. With kWidth = 4 the alignment makes
/// the compiler emit one 128-bit load or store (the pointer must be 16-byte aligned);
/// kWidth = 1 is the scalar fallback, so one kernel template serves both paths.
template <int kWidth>
struct alignas(sizeof(float) * kWidth) PackedFloats {
  float values[kWidth];
};

/// Pack `index` of an array viewed as packs of kWidth floats.
template <int kWidth>
__device__ __forceinline__ PackedFloats<kWidth> load_packed(const float* row, std::size_t index) {
  return reinterpret_cast<const PackedFloats<kWidth>*>(row)[index];
}

template <int kWidth>
__device__ __forceinline__ void store_packed(float* row, std::size_t index,
                                             const PackedFloats<kWidth>& pack) {
  reinterpret_cast<PackedFloats<kWidth>*>(row)[index] = pack;
}

/// Host side: calls launch(std::integral_constant<int, 4>) when `packed` (every pointer
/// 16-byte aligned and every row a multiple of 4 floats), else with 1, so that a
/// launcher names its kernel once: launch = [&](auto width) { kernel<width.value>... }.
template <typename Launch>
void with_width(bool packed, const Launch& launch) {
  if (packed) {
    launch(std::integral_constant<int, 4>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// ---------------------------------------------------------------- grid dependency control

/// Waits until the kernel before this one on the stream has completed and its writes
/// are visible (griddepcontrol.wait). Returns at once when the launch was not a
/// programmatic dependent one, or on GPUs before sm_90 (no such launch exists there).
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/// Lets the kernel after this one on the stream launch once every block of this grid has
/// called it or exited (griddepcontrol.launch_dependents). It promises nothing about
/// this grid's writes: the dependent's wait_for_previous_kernel waits for completion.
/// Without a programmatic dependent after it (a plain launch next) it does nothing.
__device__ __forceinline__ void allow_next_kernel_to_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// The first statement of a kernel that a decode matmul may follow (LayerNorm, attention):
/// with kAtStart, allow_next_kernel_to_launch before anything else. The start is the
/// place because nothing later in such a kernel could be hurt by the dependent: the
/// dependent's blocks are scheduled only once every block of this grid has executed the
/// instruction (or exited), so they never take a slot one of this grid's blocks still
/// waits for; until their griddepcontrol.wait they only read their own weight, which no
/// kernel writes, so what they share with this grid is the SMs' spare slots and the
/// memory bandwidth. Triggering later (after this kernel's loads, say) would only delay
/// the dependent's weight stream. Before a plain launch (cuBLASLt's products, or any
/// kernel launched without the programmatic attribute) the instruction has no effect.
__device__ __forceinline__ void launch_dependents_at_start(LaunchDependents when) {
  if (when == LaunchDependents::kAtStart) allow_next_kernel_to_launch();
}

}  // namespace ladder
