// kernels/sampling.cu - greedy step: per-row argmax with torch.argmax's tie rule, EOS
// bookkeeping, and the all-rows-finished flag.
//
// The argmax is a block reduction over (value, index) pairs under one strict total
// order, so the result does not depend on how the threads split the row: the winner
// is the largest value, a NaN beats every number, and among equals the smallest index
// wins. The all-finished flag is a second, one-block kernel on the same stream: it
// starts only after every row's flag is written, so it cannot race with them.
#include "kernels/sampling.cuh"

#include <climits>
#include <cmath>

#include "common/cuda_check.hpp"
#include "kernels/argmax_order.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxWarps = kArgmaxThreads / kWarpSize;
constexpr int kAllFinishedThreads = 256;

// Math:   token = the index of the winner among row b's candidates (order: see beats()),
//         candidate v being (values[b, v], indices ? indices[b, v] : v): the plain
//         argmax of logits, or the second pass over the LM head's per-tile winners
//         (decode_matmul.cuh); next_tokens[b] = token;
//         output_tokens[b * max_steps + step] = token;
//         finished[b] = (finished[b] != 0 || token == eos_id).
// Shapes: values, indices [B, V] (V candidates per row); next_tokens, finished [B];
//         output_tokens [B, max_steps].
// Grid:   one block of kArgmaxThreads per row b = blockIdx.x, reducing the row as
//         block_argmax (argmax_order.cuh) does; thread 0 writes.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_step_kernel(const float* values, const std::int32_t* indices,
                       const std::int32_t* forced_tokens, int V, std::int32_t* next_tokens,
                       std::int32_t* finished, std::int32_t* output_tokens, int host_step,
                       const DecodePosition* cursor, int max_steps, int eos_id) {
  __shared__ Candidate warp_winners[kArgmaxWarps];
  const int b = blockIdx.x;
  const int step = cursor != nullptr ? cursor->step : host_step;
  if (step < 0 || step >= max_steps) return;
  const std::int32_t* row_indices =
      indices != nullptr ? indices + static_cast<std::size_t>(b) * V : nullptr;
  const Candidate best = block_argmax<kArgmaxThreads>(values + static_cast<std::size_t>(b) * V,
                                                      row_indices, V, warp_winners);
  if (threadIdx.x == 0) {
    const int token = forced_tokens != nullptr
                          ? forced_tokens[static_cast<std::size_t>(b) * max_steps + step]
                          : best.index;
    next_tokens[b] = token;
    output_tokens[static_cast<std::size_t>(b) * max_steps + step] = token;
    finished[b] = (finished[b] != 0 || token == eos_id) ? 1 : 0;
  }
}

// Math:   for row r with slot = row_slots[r] >= 0: tokens_by_slot[slot] = the winner among
//         row r's candidates (values[r, v], indices[r, v]); rows with slot < 0 write nothing.
// Shapes: values, indices [rows, count]; row_slots [rows]; tokens_by_slot [max slot + 1].
// Grid:   one block of kArgmaxThreads per row r = blockIdx.x (block_argmax); thread 0 writes.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_into_slots_kernel(const float* values, const std::int32_t* indices, int count,
                             const std::int32_t* row_slots, std::int32_t* tokens_by_slot) {
  __shared__ Candidate warp_winners[kArgmaxWarps];
  const int r = blockIdx.x;
  const int slot = row_slots[r];
  if (slot < 0) return;  // the same for the whole block
  const std::size_t offset = static_cast<std::size_t>(r) * count;
  const Candidate best =
      block_argmax<kArgmaxThreads>(values + offset, indices + offset, count, warp_winners);
  if (threadIdx.x == 0) tokens_by_slot[slot] = best.index;
}

// Math:   all_finished[0] = 1 if finished[b] != 0 for every b < B, else 0; then, for
//         a device cursor, cursor->step += 1 and cursor->position += 1. With
//         kSetsLoopCondition, the condition of the graph loop this runs in becomes
//         "another step": 1 if some row is unfinished and cursor->step < max_steps.
// Shapes: finished [B]; all_finished [1].
// Grid:   one block; thread i checks rows i, i + kAllFinishedThreads, ... and
//         __syncthreads_and combines the answers; thread 0 alone writes (two threads
//         setting one condition would race).
template <bool kSetsLoopCondition>
__global__ void all_finished_kernel(const std::int32_t* finished, std::int32_t* all_finished, int B,
                                    DecodePosition* cursor, int max_steps,
                                    cudaGraphConditionalHandle loop_condition) {
  bool mine = true;
  for (int b = threadIdx.x; b < B; b += kAllFinishedThreads) mine = mine && finished[b] != 0;
  const int every_row = __syncthreads_and(mine);
  if (threadIdx.x != 0) return;
  all_finished[0] = every_row != 0 ? 1 : 0;
  if (cursor != nullptr && cursor->step < max_steps) {
    cursor->step += 1;
    cursor->position += 1;
  }
  if constexpr (kSetsLoopCondition) {
    const bool another_step = every_row == 0 && cursor->step < max_steps;
    cudaGraphSetConditional(loop_condition, another_step ? 1u : 0u);
  }
}

// Math:   history[cursor->step, i] = logits[i] for i < count, if cursor->step < max_steps.
// Shapes: logits [count] (count = B V); history [max_steps, count].
// Grid:   grid-stride over the count elements.
__global__ void store_step_logits_kernel(const float* logits, float* history,
                                         const DecodePosition* cursor, std::size_t count,
                                         int max_steps) {
  const int step = cursor->step;
  if (step < 0 || step >= max_steps) return;
  float* slot = history + static_cast<std::size_t>(step) * count;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    slot[i] = logits[i];
}

void check_argmax_step_arguments(const char* name, const float* values, std::int32_t* next_tokens,
                                 const GreedyState& state, int B, int V) {
  launch_checks::require_not_null(name, {{"logits", values},
                                         {"next_tokens", next_tokens},
                                         {"finished", state.finished},
                                         {"all_finished", state.all_finished},
                                         {"output_tokens", state.output_tokens}});
  launch_checks::require_positive(name, {{"B", B}, {"V", V}, {"max_steps", state.max_steps}});
}

/// The argmax step over row b's `count` candidates (values[b, v], indices ? indices[b, v]
/// : v), with the step read from `cursor`, which the second kernel advances; with
/// kSetsLoopCondition that kernel also sets `loop_condition`.
template <bool kSetsLoopCondition>
void launch_cursor_argmax_step(const char* name, const float* values, const std::int32_t* indices,
                               int count, std::int32_t* next_tokens, const GreedyState& state,
                               DecodePosition* cursor, int B,
                               cudaGraphConditionalHandle loop_condition, cudaStream_t stream) {
  check_argmax_step_arguments(name, values, next_tokens, state, B, count);
  launch_checks::require_not_null(name, "cursor", cursor);
  argmax_step_kernel<<<static_cast<unsigned int>(B), kArgmaxThreads, 0, stream>>>(
      values, indices, state.forced_tokens, count, next_tokens, state.finished, state.output_tokens,
      0, cursor, state.max_steps, state.eos_id);
  CUDA_CHECK_LAUNCH(stream);
  all_finished_kernel<kSetsLoopCondition><<<1, kAllFinishedThreads, 0, stream>>>(
      state.finished, state.all_finished, B, cursor, state.max_steps, loop_condition);
  CUDA_CHECK_LAUNCH(stream);
}

/// Refuses a loop-condition launch outside the capture of the graph that owns the handle.
void require_capturing(const char* name, cudaStream_t stream) {
  launch_checks::require(stream_is_capturing(stream), name,
                         "the stream must be capturing the graph that owns loop_condition (a "
                         "condition set outside its graph is undefined behavior)");
}

}  // namespace

void launch_argmax_step(const float* logits, std::int32_t* next_tokens, const GreedyState& state,
                        int B, int V, int step, cudaStream_t stream) {
  check_argmax_step_arguments("launch_argmax_step", logits, next_tokens, state, B, V);
  if (step < 0 || step >= state.max_steps)
    launch_checks::fail("launch_argmax_step", "step (" + std::to_string(step) +
                                                  ") must lie in [0, " +
                                                  std::to_string(state.max_steps) + ")");
  argmax_step_kernel<<<static_cast<unsigned int>(B), kArgmaxThreads, 0, stream>>>(
      logits, nullptr, state.forced_tokens, V, next_tokens, state.finished, state.output_tokens,
      step, nullptr, state.max_steps, state.eos_id);
  CUDA_CHECK_LAUNCH(stream);
  all_finished_kernel<false><<<1, kAllFinishedThreads, 0, stream>>>(
      state.finished, state.all_finished, B, nullptr, state.max_steps, 0);
  CUDA_CHECK_LAUNCH(stream);
}

void launch_argmax_step(const float* logits, std::int32_t* next_tokens, const GreedyState& state,
                        DecodePosition* cursor, int B, int V, cudaStream_t stream) {
  launch_cursor_argmax_step<false>("launch_argmax_step", logits, nullptr, V, next_tokens, state,
                                   cursor, B, 0, stream);
}

void launch_argmax_step_in_graph_loop(const float* logits, std::int32_t* next_tokens,
                                      const GreedyState& state, DecodePosition* cursor, int B,
                                      int V, cudaGraphConditionalHandle loop_condition,
                                      cudaStream_t stream) {
  constexpr const char* kName = "launch_argmax_step_in_graph_loop";
  require_capturing(kName, stream);
  launch_cursor_argmax_step<true>(kName, logits, nullptr, V, next_tokens, state, cursor, B,
                                  loop_condition, stream);
}

void launch_argmax_step_from_candidates(const ArgmaxCandidates& candidates,
                                        std::int32_t* next_tokens, const GreedyState& state,
                                        DecodePosition* cursor, int B, cudaStream_t stream) {
  constexpr const char* kName = "launch_argmax_step_from_candidates";
  launch_checks::require_not_null(kName, {{"candidates.values", candidates.values},
                                          {"candidates.indices", candidates.indices}});
  launch_cursor_argmax_step<false>(kName, candidates.values, candidates.indices, candidates.count,
                                   next_tokens, state, cursor, B, 0, stream);
}

void launch_argmax_step_from_candidates_in_graph_loop(
    const ArgmaxCandidates& candidates, std::int32_t* next_tokens, const GreedyState& state,
    DecodePosition* cursor, int B, cudaGraphConditionalHandle loop_condition, cudaStream_t stream) {
  constexpr const char* kName = "launch_argmax_step_from_candidates_in_graph_loop";
  require_capturing(kName, stream);
  launch_checks::require_not_null(kName, {{"candidates.values", candidates.values},
                                          {"candidates.indices", candidates.indices}});
  launch_cursor_argmax_step<true>(kName, candidates.values, candidates.indices, candidates.count,
                                  next_tokens, state, cursor, B, loop_condition, stream);
}

void launch_store_step_logits(const float* logits, float* history, const DecodePosition* cursor,
                              int B, int V, int max_steps, cudaStream_t stream) {
  constexpr const char* kName = "launch_store_step_logits";
  launch_checks::require_not_null(kName,
                                  {{"logits", logits}, {"history", history}, {"cursor", cursor}});
  launch_checks::require_positive(kName, {{"B", B}, {"V", V}, {"max_steps", max_steps}});
  const std::size_t count = static_cast<std::size_t>(B) * static_cast<std::size_t>(V);
  constexpr int kThreads = 256;
  store_step_logits_kernel<<<launch_checks::grid_stride_blocks(count, kThreads), kThreads, 0,
                             stream>>>(logits, history, cursor, count, max_steps);
  CUDA_CHECK_LAUNCH(stream);
}

void launch_argmax_into_slots(const ArgmaxCandidates& candidates, const std::int32_t* row_slots,
                              std::int32_t* tokens_by_slot, int rows, cudaStream_t stream) {
  constexpr const char* kName = "launch_argmax_into_slots";
  launch_checks::require_not_null(kName, {{"candidates.values", candidates.values},
                                          {"candidates.indices", candidates.indices},
                                          {"row_slots", row_slots},
                                          {"tokens_by_slot", tokens_by_slot}});
  launch_checks::require_positive(kName, {{"rows", rows}, {"count", candidates.count}});
  argmax_into_slots_kernel<<<static_cast<unsigned int>(rows), kArgmaxThreads, 0, stream>>>(
      candidates.values, candidates.indices, candidates.count, row_slots, tokens_by_slot);
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
