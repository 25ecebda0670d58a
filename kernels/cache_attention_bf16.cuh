// kernels/cache_attention_bf16.cuh - decode attention against a bf16 KV cache allocated
// once for the maximum length, the step's position read from device memory
// (common/reference.hpp, points R4 and R5).
//
// Notation and layouts as in cache_attention.cuh, every tensor bf16:
//   qkv     [B, 3C]                the step's c_attn output (R4: already rounded once)
//   keys,   [B, H, capacity, D]    Hugging Face's cache layout
//   values
//   out     [B, C]                 heads side by side, ready for c_proj
// The step's token sits at p = cursor->position: this launch writes its k and v (exact
// copies of the bf16 qkv, R4) to position p and attends over positions 0 .. p:
//   out[b, head h] = bf16(sum_{s <= p} softmax_s(q_b . k_s / sqrt(D)) v_s)
// with the scores, the softmax's maximum, exponentials and sum, and the weighted sum of
// the values in fp32, never stored (R5).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode_position.cuh"
#include "kernels/launch_dependents.hpp"

namespace ladder {

/// Append and attend, one block per (b, h) over the valid length L = p + 1 only; every
/// key and value row read as 16-byte pieces of 8 bf16. The block that attends (b, h) is
/// the only one touching its cache rows, and it takes position p's k and v straight from
/// qkv, so no read can race this launch's write. Sums in a fixed order (bit-identical
/// repeat runs). A cursor position outside [0, capacity) gives NaN outputs and writes no
/// cache entry. `dependents`: when a programmatic dependent launched next (c_proj's
/// decode matmul) may start (LaunchDependents; at the blocks' start unless kAtExit);
/// `launch` as launch_fused_decode_attention's (cache_attention.cuh). Throws std::invalid_argument
/// on a null pointer, B, H, C, capacity <= 0, C not divisible by H, D = C / H not a multiple of 8
/// or above kMaxHeadDim, or a pointer that is not 16-byte aligned.
void launch_decode_attention_bf16(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                  __nv_bfloat16* values, const DecodePosition* cursor, int capacity,
                                  __nv_bfloat16* out, int B, int H, int C, cudaStream_t stream,
                                  LaunchDependents dependents = LaunchDependents::kAtStart,
                                  DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

/// The same kernel with a slot and a position per row, for rows that are not one batch
/// moving in step (the slots of a server, each holding a request of its own length):
/// keys and values hold `slot_count` blocks [slot_count, H, capacity, D], and row b
/// appends at p_b = positions[b] of block s_b = slots[b] and attends over positions
/// 0 .. p_b of that block, exactly as launch_decode_attention_bf16 does for a row whose
/// block is s_b and p = p_b. Rows take qkv and out at their own row b, so a launch can
/// hold the decode rows of every slot (row b in slot b) or a prefill's rows at one
/// position (any slots). A row whose slot lies outside [0, slot_count) or whose position
/// lies outside [0, capacity) is idle: its output is 0 and it writes no cache entry (a
/// negative position or slot is how a caller marks a row that takes no part in the
/// step). The active rows' slots must be distinct (a slot is one sequence). slots and
/// positions [B] int32 on the device. `dependents` and `launch` as
/// launch_decode_attention_bf16's. Throws std::invalid_argument as
/// launch_decode_attention_bf16 (slots and positions in place of cursor), and on
/// slot_count <= 0.
void launch_decode_attention_bf16_per_row(const __nv_bfloat16* qkv, __nv_bfloat16* keys,
                                          __nv_bfloat16* values, const std::int32_t* slots,
                                          const std::int32_t* positions, int slot_count,
                                          int capacity, __nv_bfloat16* out, int B, int H, int C,
                                          cudaStream_t stream,
                                          LaunchDependents dependents = LaunchDependents::kAtStart,
                                          DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

}  // namespace ladder
