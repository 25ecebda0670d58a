// common/greedy_decoding.cpp - the prompts and the argmax step's bookkeeping on the device.
#include "common/greedy_decoding.hpp"

#include <algorithm>
#include <vector>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"

namespace ladder {

TypedBuffer<std::int32_t> upload_prompt_tokens(DeviceAllocator& allocator,
                                               const PromptBatch& prompts, cudaStream_t stream) {
  TypedBuffer<std::int32_t> tokens(allocator, prompts.tokens.size(), stream);
  CUDA_CHECK(cudaMemcpyAsync(tokens, prompts.tokens.data(), tokens.bytes(), cudaMemcpyHostToDevice,
                             stream));
  return tokens;
}

PositionMajorPrompts upload_position_major_prompts(DeviceAllocator& allocator,
                                                   const PromptBatch& prompts,
                                                   cudaStream_t stream) {
  const int B = prompts.batch;
  const int T = prompts.length;
  const std::size_t count = static_cast<std::size_t>(B) * T;
  std::vector<std::int32_t> positions(count);
  std::vector<DecodePosition> cursors(static_cast<std::size_t>(T));
  for (int t = 0; t < T; ++t) {
    std::fill_n(positions.begin() + static_cast<std::ptrdiff_t>(t) * B, B, t);
    cursors[static_cast<std::size_t>(t)] = DecodePosition{/*step=*/0, /*position=*/t};
  }
  PositionMajorPrompts device{TypedBuffer<std::int32_t>(allocator, count, stream),
                              TypedBuffer<std::int32_t>(allocator, count, stream),
                              TypedBuffer<DecodePosition>(allocator, cursors.size(), stream)};
  // From pageable memory: each copy returns once its source has been read, so the
  // vectors may go when this function returns.
  const std::vector<std::int32_t> tokens = prompts.position_major();
  CUDA_CHECK(cudaMemcpyAsync(device.tokens, tokens.data(), device.tokens.bytes(),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(device.positions, positions.data(), device.positions.bytes(),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(device.cursors, cursors.data(), device.cursors.bytes(),
                             cudaMemcpyHostToDevice, stream));
  return device;
}

GreedyBuffers::GreedyBuffers(DeviceAllocator& allocator, const PromptBatch& prompts,
                             int max_new_tokens, int eos_token_id, cudaStream_t stream)
    : batch_(prompts.batch),
      finished_(allocator, static_cast<std::size_t>(prompts.batch), stream),
      all_finished_(allocator, 1, stream),
      generated_(allocator, static_cast<std::size_t>(prompts.batch) * max_new_tokens, stream),
      state_{} {
  CUDA_CHECK(cudaMemsetAsync(finished_, 0, finished_.bytes(), stream));
  // Teacher forcing, for the tests only: ids to feed instead of the argmax, or null.
  forced_ = upload_forced_tokens(allocator, prompts, max_new_tokens, stream);
  state_ = GreedyState{forced_.as<std::int32_t>(),
                       finished_,
                       all_finished_,
                       generated_,
                       max_new_tokens,
                       eos_token_id};
}

std::vector<std::int32_t> GreedyBuffers::download_tokens(int steps, cudaStream_t stream) const {
  return download_generated_tokens(generated_, batch_, state_.max_steps, steps, stream);
}

}  // namespace ladder
