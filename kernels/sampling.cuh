// kernels/sampling.cuh - greedy decoding's step on the device: argmax of each row's
// logits, the row's end-of-sequence bookkeeping, and the "every row finished" flag.
//
// Shapes: logits [B, V] fp32; next_tokens, finished [B] int32; all_finished [1] int32;
// output_tokens [B, max_steps] int32 (row b's token of step s at b * max_steps + s).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode_position.cuh"

namespace ladder {

/// One greedy step for every row b < B:
///   token = argmax_v logits[b, v]   (ties go to the smallest index, as torch.argmax;
///                                    a NaN counts as larger than any number, as there)
///   next_tokens[b] = token;  output_tokens[b, step] = token;
///   finished[b] = 1 if it was already nonzero or token == eos_id, else 0;
/// and then all_finished[0] = 1 if every finished[b] is 1, else 0.
/// finished must be zeroed by the caller before the first step. An eos_id outside
/// [0, V) never matches: rows then never finish.
/// Teacher forcing (tests): when `forced_tokens` ([B, max_steps]) is not null, row b
/// takes forced_tokens[b, step] instead of its argmax; everything else is unchanged, so
/// every step's logits can be compared on a chosen token sequence.
/// Two kernels on `stream`: one block per row for the argmax, then one block that reads
/// all the flags, so all_finished is race-free and needs no scratch memory.
/// Throws std::invalid_argument on a null pointer, B, V, max_steps <= 0, or step
/// outside [0, max_steps).
void launch_argmax_step(const float* logits, const std::int32_t* forced_tokens,
                        std::int32_t* next_tokens, std::int32_t* finished,
                        std::int32_t* all_finished, std::int32_t* output_tokens, int B, int V,
                        int step, int max_steps, int eos_id, cudaStream_t stream);

/// The same step with the step index read from device memory (`cursor->step`), for
/// loops whose position lives on the device. After the step, the second kernel
/// advances the cursor (step + 1, position + 1). A step that would write past column
/// max_steps - 1 writes nothing and leaves the cursor alone.
void launch_argmax_step(const float* logits, const std::int32_t* forced_tokens,
                        std::int32_t* next_tokens, std::int32_t* finished,
                        std::int32_t* all_finished, std::int32_t* output_tokens,
                        DecodePosition* cursor, int B, int V, int max_steps, int eos_id,
                        cudaStream_t stream);

/// The same step (device cursor) from the LM head's argmax first pass
/// (launch_decode_lm_head, decode_matmul.cuh): row b's token is the index of the winner
/// among its `candidates` pairs (candidate_values[b, t], candidate_indices[b, t]) under
/// the same order, so it equals the argmax of the row's logits. Throws
/// std::invalid_argument on a null pointer or B, candidates, max_steps <= 0.
void launch_argmax_step_from_candidates(const float* candidate_values,
                                        const std::int32_t* candidate_indices, int candidates,
                                        const std::int32_t* forced_tokens,
                                        std::int32_t* next_tokens, std::int32_t* finished,
                                        std::int32_t* all_finished, std::int32_t* output_tokens,
                                        DecodePosition* cursor, int B, int max_steps, int eos_id,
                                        cudaStream_t stream);

}  // namespace ladder
