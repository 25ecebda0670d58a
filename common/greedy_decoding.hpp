// common/greedy_decoding.hpp - the device memory of one greedy generation that every
// chapter keeps the same way: the prompts, and what the argmax step writes (each row's
// finished flag, the "every row finished" flag, the generated ids).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/device_allocator.hpp"
#include "common/prompts.hpp"
#include "kernels/decode_position.cuh"
#include "kernels/sampling.cuh"

namespace ladder {

/// The prompt ids [B, T] copied to the device (on `stream`, without waiting).
TypedBuffer<std::int32_t> upload_prompt_tokens(DeviceAllocator& allocator,
                                               const PromptBatch& prompts, cudaStream_t stream);

/// A prompt on the device for a prefill that attends one position at a time: the ids
/// position-major, [T, B] (PromptBatch::position_major), each id's position, [T, B], and
/// one cursor {step 0, position t} per position t, [T], for the kernels that read their
/// position from device memory.
struct PositionMajorPrompts {
  TypedBuffer<std::int32_t> tokens;
  TypedBuffer<std::int32_t> positions;
  TypedBuffer<DecodePosition> cursors;
};

/// `prompts` as PositionMajorPrompts, copied on `stream` (without waiting for the GPU).
PositionMajorPrompts upload_position_major_prompts(DeviceAllocator& allocator,
                                                   const PromptBatch& prompts, cudaStream_t stream);

/// Greedy decoding's bookkeeping for one generate() call: allocated, zeroed where it
/// must be and filled with the teacher-forced ids (tests) on `stream`, in that order.
class GreedyBuffers {
 public:
  GreedyBuffers(DeviceAllocator& allocator, const PromptBatch& prompts, int max_new_tokens,
                int eos_token_id, cudaStream_t stream);

  /// What launch_argmax_step takes besides the logits and next_tokens.
  const GreedyState& state() const { return state_; }
  /// The device's "every row finished" flag, [1].
  const std::int32_t* all_finished() const { return all_finished_; }
  /// Each row's first `steps` generated ids, [B, steps] (synchronizes `stream`).
  std::vector<std::int32_t> download_tokens(int steps, cudaStream_t stream) const;

 private:
  int batch_;
  TypedBuffer<std::int32_t> finished_;      ///< [B]
  TypedBuffer<std::int32_t> all_finished_;  ///< [1]
  TypedBuffer<std::int32_t> generated_;     ///< [B, max_new_tokens]
  DeviceBuffer forced_;                     ///< [B, max_new_tokens], or empty
  GreedyState state_;
};

}  // namespace ladder
