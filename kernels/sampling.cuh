// kernels/sampling.cuh - greedy decoding's step on the device: argmax of each row's
// logits, the row's end-of-sequence bookkeeping, and the "every row finished" flag.
//
// Shapes: logits [B, V] fp32; next_tokens, finished [B] int32; all_finished [1] int32;
// output_tokens [B, max_steps] int32 (row b's token of step s at b * max_steps + s);
// all but the logits and next_tokens travel in a GreedyState.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode_position.cuh"

namespace ladder {

/// Greedy decoding's bookkeeping on the device, the same for every step of one
/// generation: what the argmax kernels read and write besides the logits.
struct GreedyState {
  const std::int32_t* forced_tokens;  ///< [B, max_steps] ids fed instead of the argmax, or null
  std::int32_t* finished;             ///< [B], zeroed before the first step
  std::int32_t* all_finished;         ///< [1]
  std::int32_t* output_tokens;        ///< [B, max_steps]
  int max_steps;
  int eos_id;
};

/// One greedy step for every row b < B:
///   token = argmax_v logits[b, v]   (ties go to the smallest index, as torch.argmax;
///                                    a NaN counts as larger than any number, as there)
///   next_tokens[b] = token;  output_tokens[b, step] = token;
///   finished[b] = 1 if it was already nonzero or token == eos_id, else 0;
/// and then all_finished[0] = 1 if every finished[b] is 1, else 0 (all in `state`).
/// An eos_id outside [0, V) never matches: rows then never finish.
/// Teacher forcing (tests): when `state.forced_tokens` is not null, row b takes
/// forced_tokens[b, step] instead of its argmax; everything else is unchanged, so every
/// step's logits can be compared on a chosen token sequence.
/// Two kernels on `stream`: one block per row for the argmax, then one block that reads
/// all the flags, so all_finished is race-free and needs no scratch memory.
/// Throws std::invalid_argument on a null pointer, B, V, max_steps <= 0, or step
/// outside [0, max_steps).
void launch_argmax_step(const float* logits, std::int32_t* next_tokens, const GreedyState& state,
                        int B, int V, int step, cudaStream_t stream);

/// The same step with the step index read from device memory (`cursor->step`), for
/// loops whose position lives on the device. After the step, the second kernel
/// advances the cursor (step + 1, position + 1). A step that would write past column
/// max_steps - 1 writes nothing and leaves the cursor alone.
void launch_argmax_step(const float* logits, std::int32_t* next_tokens, const GreedyState& state,
                        DecodePosition* cursor, int B, int V, cudaStream_t stream);

/// The device-cursor step as the body of a graph's WHILE loop: the same two kernels,
/// and the second one then sets the loop's condition (cudaGraphSetConditional on
/// `loop_condition`) to 1 when another step is to run - some row is unfinished and
/// cursor->step, already advanced, is below max_steps - and to 0 otherwise. Only while
/// `stream` captures the graph that owns the handle (std::invalid_argument otherwise):
/// setting a condition outside its graph is undefined behavior.
void launch_argmax_step_in_graph_loop(const float* logits, std::int32_t* next_tokens,
                                      const GreedyState& state, DecodePosition* cursor, int B,
                                      int V, cudaGraphConditionalHandle loop_condition,
                                      cudaStream_t stream);

/// history[s] = logits for the step s = cursor->step (nothing when s >= max_steps), one
/// kernel: a loop that runs on the GPU keeps every step's logits [B, V] this way, in
/// history [max_steps, B, V], for the tests to read once it has finished (a copy node
/// could not follow the step, whose index lives on the device).
void launch_store_step_logits(const float* logits, float* history, const DecodePosition* cursor,
                              int B, int V, int max_steps, cudaStream_t stream);

/// The LM head's argmax first pass (launch_decode_lm_head, decode_matmul.cuh): row b's
/// `count` per-tile winners (values[b, t], indices[b, t]), [B, count] each.
struct ArgmaxCandidates {
  const float* values;
  const std::int32_t* indices;
  int count;
};

/// The device-cursor step (as above) from the LM head's candidates: row b's token is the
/// index of the winner among its candidates under the same order, so it equals the
/// argmax of the row's logits. Throws std::invalid_argument as above, on a null
/// candidate pointer, or on count <= 0.
void launch_argmax_step_from_candidates(const ArgmaxCandidates& candidates,
                                        std::int32_t* next_tokens, const GreedyState& state,
                                        DecodePosition* cursor, int B, cudaStream_t stream);

/// launch_argmax_step_from_candidates as the body of a graph's WHILE loop, setting
/// `loop_condition` as launch_argmax_step_in_graph_loop does (same capture rule).
void launch_argmax_step_from_candidates_in_graph_loop(
    const ArgmaxCandidates& candidates, std::int32_t* next_tokens, const GreedyState& state,
    DecodePosition* cursor, int B, cudaGraphConditionalHandle loop_condition, cudaStream_t stream);

/// Greedy tokens of rows that serve slots (continuous batching: a step's rows belong to
/// requests in different slots, and some slots sit the step out): for every row r < rows
/// whose slot = row_slots[r] is >= 0,
///   tokens_by_slot[slot] = the argmax of row r's candidates (the order of
///                          launch_argmax_step: ties to the smallest index, NaN largest);
/// a row with row_slots[r] < 0 writes nothing, so its slot keeps its token. No other
/// bookkeeping: which request a slot holds, and when it stops, is the host's.
/// row_slots [rows] int32 on the device, no slot twice; tokens_by_slot as large as the
/// largest slot + 1. One block per row. Throws std::invalid_argument on a null pointer,
/// rows <= 0 or count <= 0.
void launch_argmax_into_slots(const ArgmaxCandidates& candidates, const std::int32_t* row_slots,
                              std::int32_t* tokens_by_slot, int rows, cudaStream_t stream);

}  // namespace ladder
