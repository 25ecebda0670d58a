// kernels/cache_attention_bf16.cu - decode attention over a bf16 KV cache: one block per
// (b, h), 16 groups of 8 lanes, each group one cache position at a time, an online
// softmax per group in fp32, the 16 groups' states merged in group order at the end.
//
// A key or value row of D = 64 bf16 is 128 bytes: 8 lanes x one 16-byte piece (D = 128:
// two pieces per lane), so a warp reads 4 positions' keys per instruction, fully
// coalesced, and the score is the 8 lanes' partial dots added by 3 shuffles.
#include "kernels/cache_attention_bf16.cuh"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/cuda_check.hpp"
#include "kernels/cache_attention_bf16_head.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/kernel_limits.hpp"
#include "kernels/launch_checks.hpp"
#include "kernels/programmatic_launch.cuh"

namespace ladder {

namespace {

// One block per (b, h) (blockIdx.x = b H + h) of kAttentionThreads threads; the body is
// attend_head_bf16 (cache_attention_bf16_head.cuh).
// Promises: LDG.E.128 STG.E.128 PREEXIT ACQBULK
__global__ void __launch_bounds__(kAttentionThreads)
    decode_attention_bf16_kernel(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                 __nv_bfloat16* values, const DecodePosition* cursor, int capacity,
                                 __nv_bfloat16* out, int H, int C, LaunchDependents dependents) {
  // c_proj's decode matmul may start loading its weight now (device_primitives.cuh): its
  // blocks are scheduled once all B H blocks here have started, take only the slots they
  // leave, and load their weight while this kernel reads the cache.
  launch_dependents_at_start(dependents);
  // Under a programmatic launch (DecodeLaunch) this block may start before c_attn has
  // finished writing qkv: nothing is read before the wait (at once for a plain launch).
  wait_for_previous_kernel();
  __shared__ AttentionShared shared;
  const int b = static_cast<int>(blockIdx.x) / H;
  const int h = static_cast<int>(blockIdx.x) % H;
  attend_head_bf16(b, h, cursor->position, qkv, keys, values, capacity, out, H, C,
                   static_cast<int>(threadIdx.x), shared, [] { __syncthreads(); });
}

// The serving slots' kernel: one block per (b, h) as above, row b in cache block slots[b]
// at positions[b]; a row outside [0, slot_count) x [0, capacity) is idle: output 0, no
// cache write (the body would give NaN). The body runs on row b's own pointers (qkv and
// out at row b, the cache at its slot's block) as row 0 of a one-row batch.
// Promises: LDG.E.128 STG.E.128 PREEXIT ACQBULK
__global__ void __launch_bounds__(kAttentionThreads)
    decode_attention_bf16_per_row_kernel(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                         __nv_bfloat16* values, const std::int32_t* slots,
                                         const std::int32_t* positions, int slot_count,
                                         int capacity, __nv_bfloat16* out, int H, int C,
                                         LaunchDependents dependents) {
  launch_dependents_at_start(dependents);
  wait_for_previous_kernel();
  __shared__ AttentionShared shared;
  const int b = static_cast<int>(blockIdx.x) / H;
  const int h = static_cast<int>(blockIdx.x) % H;
  const int slot = slots[b];
  const int p = positions[b];
  __nv_bfloat16* out_row = out + static_cast<std::size_t>(b) * C;
  if (slot < 0 || slot >= slot_count || p < 0 || p >= capacity) {
    const int D = C / H;
    if (static_cast<int>(threadIdx.x) < D) out_row[h * D + threadIdx.x] = __float2bfloat16_rn(0.0f);
    return;
  }
  const std::size_t block = static_cast<std::size_t>(slot) * capacity * C;
  attend_head_bf16(0, h, p, qkv + static_cast<std::size_t>(b) * 3 * C, keys + block, values + block,
                   capacity, out_row, H, C, static_cast<int>(threadIdx.x), shared,
                   [] { __syncthreads(); });
}

/// The arguments both launchers check; `where` names the device position(s) pointer.
void check_decode_attention_bf16_arguments(const char* name, const __nv_bfloat16* qkv,
                                           const __nv_bfloat16* keys, const __nv_bfloat16* values,
                                           const char* where_name, const void* where, int capacity,
                                           const __nv_bfloat16* out, int B, int H, int C) {
  launch_checks::require_not_null(
      name, {{"qkv", qkv}, {"keys", keys}, {"values", values}, {where_name, where}, {"out", out}});
  launch_checks::require_positive(name, {{"B", B}, {"H", H}, {"C", C}, {"capacity", capacity}});
  launch_checks::require_divisible(name, "C", C, "H", H);
  const int D = C / H;
  // The chapter's case only (no scalar fallback): rows of D in 16-byte packs of 8 bf16.
  launch_checks::require_divisible(name, "the head size D = C / H", D, "the bf16 pack",
                                   kBfloatPack);
  launch_checks::require_at_most(name, "the head size D = C / H", D, kMaxHeadDim,
                                 "one thread per head dimension (kMaxHeadDim)");
  launch_checks::require(launch_checks::is_16_byte_aligned(qkv) &&
                             launch_checks::is_16_byte_aligned(keys) &&
                             launch_checks::is_16_byte_aligned(values),
                         name, "qkv, keys and values must be 16-byte aligned");
  launch_checks::require(static_cast<long long>(B) * H <= 0x7fffffff, name,
                         "B * H must fit in an int");
}

}  // namespace

void launch_decode_attention_bf16(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                  __nv_bfloat16* values, const DecodePosition* cursor, int capacity,
                                  __nv_bfloat16* out, int B, int H, int C, cudaStream_t stream,
                                  LaunchDependents dependents, DecodeLaunch launch) {
  check_decode_attention_bf16_arguments("launch_decode_attention_bf16", qkv, keys, values, "cursor",
                                        cursor, capacity, out, B, H, C);
  launch_between_products(launch, decode_attention_bf16_kernel,
                          dim3(static_cast<unsigned int>(B * H)), dim3(kAttentionThreads), 0,
                          stream, qkv, keys, values, cursor, capacity, out, H, C, dependents);
  CUDA_CHECK_LAUNCH(stream);
}

void launch_decode_attention_bf16_per_row(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                          __nv_bfloat16* values, const std::int32_t* slots,
                                          const std::int32_t* positions, int slot_count,
                                          int capacity, __nv_bfloat16* out, int B, int H, int C,
                                          cudaStream_t stream, LaunchDependents dependents,
                                          DecodeLaunch launch) {
  constexpr const char* kName = "launch_decode_attention_bf16_per_row";
  launch_checks::require_not_null(kName, "slots", slots);
  launch_checks::require_positive(kName, {{"slot_count", slot_count}});
  check_decode_attention_bf16_arguments(kName, qkv, keys, values, "positions", positions, capacity,
                                        out, B, H, C);
  launch_between_products(launch, decode_attention_bf16_per_row_kernel,
                          dim3(static_cast<unsigned int>(B * H)), dim3(kAttentionThreads), 0,
                          stream, qkv, keys, values, slots, positions, slot_count, capacity, out, H,
                          C, dependents);
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
