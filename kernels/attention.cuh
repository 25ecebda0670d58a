// kernels/attention.cuh - causal multi-head self-attention, over whole sequences and
// for one decode step against a KV cache; and the writes that fill that cache.
//
// Notation: B batch rows, T tokens per row, C = n_embd, H heads, D = C / H (head
// size, at most kMaxHeadDim), L valid cached positions, capacity cached positions
// allocated. Layouts (fp32, row-major):
//   qkv     [B, T, 3C]            q, k, v side by side; head h in columns h*D .. h*D+D-1
//                                 of each third (the output of GPT-2's c_attn)
//   keys,   [B, H, capacity, D]   the KV cache, Hugging Face's layout; positions
//   values                        0 .. L-1 are valid
//   out     [B, T, C] or [B, C]   heads side by side again, ready for c_proj
// Scores are q.k / sqrt(D), softmax in fp32 with expf, accumulated online (running
// maximum and sum), so no [T, T] score matrix is ever stored.
#pragma once

#include <cuda_runtime.h>

#include "kernels/kernel_limits.hpp"  // kMaxHeadDim

namespace ladder {

/// Causal attention over whole sequences: for every b, h and query t,
///   out[b, t, head h] = sum_{s <= t} softmax_s(q_t . k_s / sqrt(D)) v_s,
/// q_t, k_s, v_s the head-h slices of qkv rows (b, t) and (b, s).
/// qkv [B, T, 3C], out [B, T, C]. One block per (b, h, 32 consecutive queries), which
/// share every key and value tile through shared memory.
/// Throws std::invalid_argument on a null pointer, B, T, H, C <= 0, C not divisible by
/// H, or D > kMaxHeadDim.
void launch_causal_attention(const float* qkv, float* out, int B, int T, int H, int C,
                             cudaStream_t stream);

/// One query per row against the first L cached positions:
///   out[b, head h] = sum_{s < L} softmax_s(q_b . keys[b, h, s] / sqrt(D)) values[b, h, s].
/// q is row b at q + b * q_row_stride (q_row_stride = C for a [B, C] buffer, 3C to read
/// the q third of a [B, 3C] qkv buffer in place); keys, values [B, H, capacity, D];
/// out [B, C]. One block per (b, h); its warps split the positions and merge at the end.
/// Throws std::invalid_argument on a null pointer, B, H, C, L <= 0, L > capacity,
/// q_row_stride < C, C not divisible by H, or D > kMaxHeadDim.
void launch_decode_attention(const float* q, int q_row_stride, const float* keys,
                             const float* values, float* out, int B, int L, int capacity, int H,
                             int C, cudaStream_t stream);

/// Hugging Face's DynamicCache update (torch.cat) for keys and values in one launch:
/// a cache one position longer, holding the L cached positions and the step's k, v:
///   new_keys[b, h, s, d]   = s < L ? keys[b, h, s, d]   : qkv[b, C + h*D + d],
///   new_values[b, h, s, d] = s < L ? values[b, h, s, d] : qkv[b, 2C + h*D + d],
/// for s <= L. qkv [B, 3C] (the step's c_attn output), keys, values [B, H, L, D] (may
/// be null when L = 0), new_keys, new_values [B, H, L + 1, D], not overlapping the old.
/// Throws std::invalid_argument on a null pointer, B, H, C <= 0, L < 0, or C not
/// divisible by H.
void launch_grow_kv_cache(const float* qkv, const float* keys, const float* values, float* new_keys,
                          float* new_values, int L, int B, int H, int C, cudaStream_t stream);

/// Stores the keys and values of T consecutive positions of every row (a prefill):
///   keys[b, h, first_position + t, d]   = qkv[b, t, C + h*D + d],
///   values[b, h, first_position + t, d] = qkv[b, t, 2C + h*D + d]   for t < T.
/// qkv [B, T, 3C] (c_attn's output over the prompt), keys, values [B, H, capacity, D];
/// cache positions outside first_position .. first_position + T - 1 are not touched.
/// Throws std::invalid_argument on a null pointer, B, T, H, C, capacity <= 0, C not
/// divisible by H, first_position < 0, or first_position + T > capacity.
void launch_store_kv_sequence(const float* qkv, float* keys, float* values, int first_position,
                              int T, int capacity, int B, int H, int C, cudaStream_t stream);

}  // namespace ladder
