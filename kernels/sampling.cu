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
// Grid:   one block of kArgmaxThreads per row b = blockIdx.x. Thread i scans columns
//         i, i + kArgmaxThreads, ... (coalesced), each warp reduces its lanes by
//         shuffles, and warp 0 reduces the per-warp winners from shared memory.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_step_kernel(const float* values, const std::int32_t* indices,
                       const std::int32_t* forced_tokens, int V, std::int32_t* next_tokens,
                       std::int32_t* finished, std::int32_t* output_tokens, int host_step,
                       const DecodePosition* cursor, int max_steps, int eos_id) {
  __shared__ Candidate warp_winners[kArgmaxWarps];
  const int b = blockIdx.x;
  const int step = cursor != nullptr ? cursor->step : host_step;
  if (step < 0 || step >= max_steps) return;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const float* row = values + static_cast<std::size_t>(b) * V;
  const std::int32_t* row_indices =
      indices != nullptr ? indices + static_cast<std::size_t>(b) * V : nullptr;

  Candidate best = no_candidate();
  for (int v = threadIdx.x; v < V; v += kArgmaxThreads) {
    const Candidate current{row[v], row_indices != nullptr ? row_indices[v] : v};
    if (beats(current, best)) best = current;
  }
  best = warp_argmax(best);
  if (lane == 0) warp_winners[warp] = best;
  __syncthreads();
  if (warp != 0) return;
  best = warp_argmax(warp_winners[lane]);  // kArgmaxWarps == kWarpSize: one winner per lane
  if (lane == 0) {
    const int token = forced_tokens != nullptr
                          ? forced_tokens[static_cast<std::size_t>(b) * max_steps + step]
                          : best.index;
    next_tokens[b] = token;
    output_tokens[static_cast<std::size_t>(b) * max_steps + step] = token;
    finished[b] = (finished[b] != 0 || token == eos_id) ? 1 : 0;
  }
}
static_assert(kArgmaxWarps == kWarpSize, "the last stage reduces one winner per lane of one warp");

// Math:   all_finished[0] = 1 if finished[b] != 0 for every b < B, else 0; then, for
//         a device cursor, cursor->step += 1 and cursor->position += 1.
// Shapes: finished [B]; all_finished [1].
// Grid:   one block; thread i checks rows i, i + kAllFinishedThreads, ... and
//         __syncthreads_and combines the answers.
__global__ void all_finished_kernel(const std::int32_t* finished, std::int32_t* all_finished, int B,
                                    DecodePosition* cursor, int max_steps) {
  bool mine = true;
  for (int b = threadIdx.x; b < B; b += kAllFinishedThreads) mine = mine && finished[b] != 0;
  const int every_row = __syncthreads_and(mine);
  if (threadIdx.x != 0) return;
  all_finished[0] = every_row != 0 ? 1 : 0;
  if (cursor != nullptr && cursor->step < max_steps) {
    cursor->step += 1;
    cursor->position += 1;
  }
}

void check_argmax_step_arguments(const float* logits, std::int32_t* next_tokens,
                                 std::int32_t* finished, std::int32_t* all_finished,
                                 std::int32_t* output_tokens, int B, int V, int max_steps) {
  constexpr const char* kName = "launch_argmax_step";
  launch_checks::require_not_null(kName, {{"logits", logits},
                                          {"next_tokens", next_tokens},
                                          {"finished", finished},
                                          {"all_finished", all_finished},
                                          {"output_tokens", output_tokens}});
  launch_checks::require_positive(kName, {{"B", B}, {"V", V}, {"max_steps", max_steps}});
}

}  // namespace

void launch_argmax_step(const float* logits, const std::int32_t* forced_tokens,
                        std::int32_t* next_tokens, std::int32_t* finished,
                        std::int32_t* all_finished, std::int32_t* output_tokens, int B, int V,
                        int step, int max_steps, int eos_id, cudaStream_t stream) {
  check_argmax_step_arguments(logits, next_tokens, finished, all_finished, output_tokens, B, V,
                              max_steps);
  if (step < 0 || step >= max_steps)
    launch_checks::fail(
        "launch_argmax_step",
        "step (" + std::to_string(step) + ") must lie in [0, " + std::to_string(max_steps) + ")");
  argmax_step_kernel<<<static_cast<unsigned int>(B), kArgmaxThreads, 0, stream>>>(
      logits, nullptr, forced_tokens, V, next_tokens, finished, output_tokens, step, nullptr,
      max_steps, eos_id);
  CUDA_CHECK_LAUNCH();
  all_finished_kernel<<<1, kAllFinishedThreads, 0, stream>>>(finished, all_finished, B, nullptr,
                                                             max_steps);
  CUDA_CHECK_LAUNCH();
}

void launch_argmax_step(const float* logits, const std::int32_t* forced_tokens,
                        std::int32_t* next_tokens, std::int32_t* finished,
                        std::int32_t* all_finished, std::int32_t* output_tokens,
                        DecodePosition* cursor, int B, int V, int max_steps, int eos_id,
                        cudaStream_t stream) {
  check_argmax_step_arguments(logits, next_tokens, finished, all_finished, output_tokens, B, V,
                              max_steps);
  launch_checks::require_not_null("launch_argmax_step", "cursor", cursor);
  argmax_step_kernel<<<static_cast<unsigned int>(B), kArgmaxThreads, 0, stream>>>(
      logits, nullptr, forced_tokens, V, next_tokens, finished, output_tokens, 0, cursor, max_steps,
      eos_id);
  CUDA_CHECK_LAUNCH();
  all_finished_kernel<<<1, kAllFinishedThreads, 0, stream>>>(finished, all_finished, B, cursor,
                                                             max_steps);
  CUDA_CHECK_LAUNCH();
}

void launch_argmax_step_from_candidates(const float* candidate_values,
                                        const std::int32_t* candidate_indices, int candidates,
                                        const std::int32_t* forced_tokens,
                                        std::int32_t* next_tokens, std::int32_t* finished,
                                        std::int32_t* all_finished, std::int32_t* output_tokens,
                                        DecodePosition* cursor, int B, int max_steps, int eos_id,
                                        cudaStream_t stream) {
  constexpr const char* kName = "launch_argmax_step_from_candidates";
  launch_checks::require_not_null(kName, {{"candidate_values", candidate_values},
                                          {"candidate_indices", candidate_indices},
                                          {"next_tokens", next_tokens},
                                          {"finished", finished},
                                          {"all_finished", all_finished},
                                          {"output_tokens", output_tokens},
                                          {"cursor", cursor}});
  launch_checks::require_positive(kName,
                                  {{"B", B}, {"candidates", candidates}, {"max_steps", max_steps}});
  argmax_step_kernel<<<static_cast<unsigned int>(B), kArgmaxThreads, 0, stream>>>(
      candidate_values, candidate_indices, forced_tokens, candidates, next_tokens, finished,
      output_tokens, 0, cursor, max_steps, eos_id);
  CUDA_CHECK_LAUNCH();
  all_finished_kernel<<<1, kAllFinishedThreads, 0, stream>>>(finished, all_finished, B, cursor,
                                                             max_steps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ladder
