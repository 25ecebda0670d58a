// kernels/cache_attention.cuh - decode attention against a KV cache allocated once for
// the maximum length, with the step's position read from device memory.
//
// Notation and layouts as in attention.cuh: B rows, C = n_embd, H heads, D = C / H
// (at most kMaxHeadDim); the cache holds capacity positions per (b, h):
//   qkv     [B, 3C]                the step's c_attn output: q, k, v side by side
//   keys,   [B, H, capacity, D]    Hugging Face's cache layout
//   values
//   out     [B, C]                 heads side by side, ready for c_proj
// The step's token sits at position p = cursor->position (see decode_position.cuh):
// positions 0 .. p - 1 hold earlier steps, p receives this step's k and v, and
// positions p + 1 .. capacity - 1 are unused. Nothing that changes from step to step
// is passed from the host, so every launch here can be captured once in a CUDA graph.
//
// Two ways to attend, the lesson of chapters 04 and 05:
//   * static-cache attention (Hugging Face's StaticCache): scores over all capacity
//     positions, those after p masked with -inf before the softmax. Every step reads the
//     whole cache, however short the sequence still is.
//   * fused decode attention: appends k and v and attends over positions 0 .. p only,
//     the valid length split across blocks (flash-decoding) so that even one row keeps
//     the GPU busy.
// Both compute out[b, head h] = sum_{s <= p} softmax_s(q . k_s / sqrt(D)) v_s.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/decode_position.cuh"
#include "kernels/launch_dependents.hpp"

namespace ladder {

/// Appends one step's keys and values to the cache at p = cursor->position:
///   keys[b, h, p, d]   = qkv[b, C + h*D + d],
///   values[b, h, p, d] = qkv[b, 2C + h*D + d].
/// A cursor position outside [0, capacity) writes nothing (no out-of-bounds write).
/// Throws std::invalid_argument on a null pointer, B, H, C, capacity <= 0 or C not
/// divisible by H. (The kernel is launch_store_kv_sequence's, in attention.cu.)
void launch_append_kv_at_cursor(const float* qkv, float* keys, float* values,
                                const DecodePosition* cursor, int capacity, int B, int H, int C,
                                cudaStream_t stream);

/// Hugging Face StaticCache attention: for every b, h,
///   score_s = q_b . keys[b, h, s] / sqrt(D) + (s <= p ? 0 : -inf),   s < capacity,
///   out[b, head h] = sum_{s < capacity} softmax_s(score) values[b, h, s],
/// which equals decode attention over positions 0 .. p. Every key and value of the
/// cache is read (the masked ones are multiplied by probability 0), so the unused
/// positions must hold finite numbers - as they do in a zero-initialised cache - and
/// keys small enough that their score stays finite. q is row b at q + b * q_row_stride
/// (3C reads the q third of the qkv buffer in place). One block per (b, h).
/// A cursor position outside [0, capacity) gives NaN outputs.
/// Throws std::invalid_argument on a null pointer, B, H, C, capacity <= 0,
/// q_row_stride < C, C not divisible by H, or D > kMaxHeadDim.
void launch_static_cache_attention(const float* q, int q_row_stride, const float* keys,
                                   const float* values, const DecodePosition* cursor, int capacity,
                                   float* out, int B, int H, int C, cudaStream_t stream);

/// Bytes of device workspace launch_fused_decode_attention needs for these shapes
/// (a few MiB at most for GPT-2 small; independent of the GPU).
/// Throws std::invalid_argument on B, H, C, capacity <= 0 or C not divisible by H.
std::size_t fused_decode_attention_workspace_bytes(int B, int H, int C, int capacity);

/// Append and attend in one kernel, over the valid length L = p + 1 only:
///   keys[b, h, p] = k_b,  values[b, h, p] = v_b   (the head-h slices of qkv row b),
///   out[b, head h] = sum_{s <= p} softmax_s(q_b . k_s / sqrt(D)) v_s.
/// Positions after p are never read. Flash-decoding: each (b, h) gets one block per 128
/// positions of the capacity (at most 32 blocks), each block takes a share of the
/// positions 0 .. p, whose length it reads from the cursor, with one chunk of 32
/// positions per warp; blocks whose share lies past the length exit at once. Each block leaves its
/// partial softmax state (max, sum, weighted values) in `workspace`, and the last block
/// of a (b, h) to finish merges them in split order, so the result does not depend on
/// the order in which blocks run. The block that holds position p takes this step's k,
/// v straight from qkv and is the only one writing them to the cache: no block ever
/// reads a cache entry that another block of the same launch writes.
///
/// workspace: fused_decode_attention_workspace_bytes(B, H, C, capacity) bytes, 16-byte
/// aligned, zero-filled once before its first use (cudaMemset); every launch leaves its
/// arrival counters at zero again (the partial states need no reset: a launch writes
/// each one before it reads it). One workspace per launch that may run concurrently
/// with another.
/// A cursor position outside [0, capacity) gives NaN outputs and writes no cache entry.
/// `dependents`: when a programmatic dependent launched next (c_proj's decode matmul)
/// may start (LaunchDependents; every block lets it at its start unless kAtExit).
/// `launch`: how this launch waits for the kernel before it (DecodeLaunch; with
/// kProgrammatic its blocks may start before that kernel (c_attn) has finished, and wait
/// for it before they read anything; kernels/programmatic_launch.cuh says where it may be
/// passed). The same bits either way.
/// Throws std::invalid_argument on a null pointer, a misaligned workspace, B, H, C,
/// capacity <= 0, C not divisible by H, or D > kMaxHeadDim.
void launch_fused_decode_attention(const float* qkv, float* keys, float* values,
                                   const DecodePosition* cursor, int capacity, float* out,
                                   void* workspace, int B, int H, int C, cudaStream_t stream,
                                   LaunchDependents dependents = LaunchDependents::kAtStart,
                                   DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

/// The fused kernel with a position per row, for rows that are not one batch moving in
/// step (the slots of a server, each holding a request of its own length): row b
/// appends at p_b = positions[b] and attends over positions 0 .. p_b of its own cache
/// rows, exactly as launch_fused_decode_attention does for p = p_b. A row whose
/// position lies outside [0, capacity) is idle: its output is 0 and it writes no cache
/// entry (a negative position is how a caller marks a slot that takes no part in the
/// step). positions [B] int32 on the device; the same workspace rules. A programmatic
/// dependent launched next may start as the blocks start (LaunchDependents::kAtStart).
/// Throws std::invalid_argument as launch_fused_decode_attention.
void launch_fused_decode_attention_per_row(const float* qkv, float* keys, float* values,
                                           const std::int32_t* positions, int capacity, float* out,
                                           void* workspace, int B, int H, int C,
                                           cudaStream_t stream);

}  // namespace ladder
