// kernels/embedding.cuh - GPT-2's input embedding: token embedding plus position embedding.
//
//   out[r, :] = wte[token of row r, :] + wpe[position of row r, :]
//
// Shapes: wte [V, C] (the token embedding, also the tied LM head), wpe [n_positions, C],
// out [rows, C], all fp32 row-major; token ids and positions are int32 on the device.
// Ids and positions are not range-checked on the device: tokens must lie in [0, V) and
// positions in [0, n_positions).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode_position.cuh"

namespace ladder {

/// Each row has its own position: out[r, :] = wte[tokens[r], :] + wpe[positions[r], :]
/// for r < rows. tokens and positions are [rows] on the device.
/// Throws std::invalid_argument on a null pointer or rows, C <= 0.
void launch_embedding(const std::int32_t* tokens, const std::int32_t* positions, const float* wte,
                      const float* wpe, float* out, int rows, int C, cudaStream_t stream);

/// A [B, T] block of tokens whose positions follow from their place in the row:
/// the token at (b, t) sits at position first_position + t, so
/// out[b * T + t, :] = wte[tokens[b * T + t], :] + wpe[first_position + t, :].
/// first_position = 0 embeds whole sequences; first_position = L embeds the T new
/// tokens of each row after L cached ones (T = 1 for one decode step).
/// Throws std::invalid_argument on a null pointer, B, T, C <= 0 or first_position < 0.
void launch_sequence_embedding(const std::int32_t* tokens, const float* wte, const float* wpe,
                               float* out, int B, int T, int first_position, int C,
                               cudaStream_t stream);

/// One decode step whose position lives in device memory (see decode_position.cuh):
/// every row feeds its token at the same position, read on the device,
///   out[b, :] = wte[tokens[b], :] + wpe[cursor->position, :]   for b < B.
/// tokens [B], out [B, C]. Nothing that changes between steps is passed from the host,
/// so the launch can be captured once in a CUDA graph and replayed.
/// Throws std::invalid_argument on a null pointer or B, C <= 0.
void launch_embedding_at_cursor(const std::int32_t* tokens, const DecodePosition* cursor,
                                const float* wte, const float* wpe, float* out, int B, int C,
                                cudaStream_t stream);

// ---------------------------------------------------------------- bf16
// The same in bf16 (common/reference.hpp, point R2): wte and wpe already bf16 (R1), the
// residual stream starts as out = bf16(wte[token] + wpe[position]), the sum taken in
// fp32 and rounded once.

/// Each row has its own position: out[r, :] = bf16(wte[tokens[r], :] + wpe[positions[r], :])
/// for r < rows (a prefill). tokens and positions are [rows] on the device.
/// Throws std::invalid_argument on a null pointer or rows, C <= 0.
void launch_embedding_bf16(const std::int32_t* tokens, const std::int32_t* positions,
                           const __nv_bfloat16* wte, const __nv_bfloat16* wpe, __nv_bfloat16* out,
                           int rows, int C, cudaStream_t stream);

/// One decode step at the device-resident position (graph-capturable):
/// out[b, :] = bf16(wte[tokens[b], :] + wpe[cursor->position, :]) for b < B.
/// Throws std::invalid_argument on a null pointer or B, C <= 0.
void launch_embedding_at_cursor_bf16(const std::int32_t* tokens, const DecodePosition* cursor,
                                     const __nv_bfloat16* wte, const __nv_bfloat16* wpe,
                                     __nv_bfloat16* out, int B, int C, cudaStream_t stream);

}  // namespace ladder
