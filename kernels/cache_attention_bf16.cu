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

}  // namespace

void launch_decode_attention_bf16(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                  __nv_bfloat16* values, const DecodePosition* cursor, int capacity,
                                  __nv_bfloat16* out, int B, int H, int C, cudaStream_t stream,
                                  LaunchDependents dependents, DecodeLaunch launch) {
  constexpr const char* kName = "launch_decode_attention_bf16";
  launch_checks::require_not_null(
      kName, {{"qkv", qkv}, {"keys", keys}, {"values", values}, {"cursor", cursor}, {"out", out}});
  launch_checks::require_positive(kName, {{"B", B}, {"H", H}, {"C", C}, {"capacity", capacity}});
  launch_checks::require_divisible(kName, "C", C, "H", H);
  const int D = C / H;
  // The chapter's case only (no scalar fallback): rows of D in 16-byte packs of 8 bf16.
  launch_checks::require_divisible(kName, "the head size D = C / H", D, "the bf16 pack",
                                   kBfloatPack);
  launch_checks::require_at_most(kName, "the head size D = C / H", D, kMaxHeadDim,
                                 "one thread per head dimension (kMaxHeadDim)");
  launch_checks::require(launch_checks::is_16_byte_aligned(qkv) &&
                             launch_checks::is_16_byte_aligned(keys) &&
                             launch_checks::is_16_byte_aligned(values),
                         kName, "qkv, keys and values must be 16-byte aligned");
  launch_checks::require(static_cast<long long>(B) * H <= 0x7fffffff, kName,
                         "B * H must fit in an int");
  launch_between_products(launch, decode_attention_bf16_kernel,
                          dim3(static_cast<unsigned int>(B * H)), dim3(kAttentionThreads), 0, stream, qkv,
                          keys, values, cursor, capacity, out, H, C, dependents);
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
