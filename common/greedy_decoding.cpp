// common/greedy_decoding.cpp - the prompts and the argmax step's bookkeeping on the device.
#include "common/greedy_decoding.hpp"

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
