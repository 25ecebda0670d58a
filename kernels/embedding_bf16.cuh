// kernels/embedding_bf16.cuh - GPT-2's input embedding in bf16 (common/reference.hpp,
// point R2): the residual stream starts as
//
//   out[r, :] = bf16(wte[token of row r, :] + wpe[position of row r, :])
//
// with wte [V, C] and wpe [n_positions, C] already bf16 (R1), the sum taken in fp32 and
// rounded once. Shapes as in embedding.cuh; ids and positions are not range-checked on
// the device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode_position.cuh"

namespace ladder {

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
