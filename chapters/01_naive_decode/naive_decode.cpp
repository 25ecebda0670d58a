// chapters/01_naive_decode/naive_decode.cpp - rung 01: naive decode.
//
// The plainest decode loop, in C++ (the PyTorch baseline's first variant). Every step
// runs the whole GPT-2 forward pass over every token so far - B rows of T tokens, T
// growing by one per step - to predict a single new token per row. The work per step
// grows with T and the total with N^2. Every activation is taken from a caching
// allocator modelled on PyTorch's, so the growing, short-lived buffers fragment its
// memory the way they do in PyTorch. After every step the host reads the "all rows
// finished" flag with a blocking copy.
//
// Run:      build/current/chapters/01_naive_decode              (B = 32; N = 100, 200, 400)
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/01_naive_decode --new-tokens 20
//           (each "step" range ends in a blocking device-to-host copy: the per-step sync)
//
// Notation: B rows, T tokens so far, C = n_embd, H heads, V vocabulary.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/greedy_decoding.hpp"
#include "common/nvtx.hpp"
#include "common/step_context.hpp"
#include "kernels/attention.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

class Gpt2Decoder final : public Decoder {
 public:
  Gpt2Decoder(const DeviceModel& model, const DecoderOptions& options)
      : model_(model),
        config_(model.config()),
        eos_token_id_(options.eos_token_id),
        allocator_(make_device_allocator("caching")),
        step_(*allocator_, options.allow_tf32) {}

  DeviceAllocator& allocator() override { return *allocator_; }

  GenerationOutput generate(const PromptBatch& prompts, int max_new_tokens,
                            LogitsRecorder& logits) override {
    const int B = prompts.batch;
    int T = prompts.length;
    const cudaStream_t stream = step_.stream();

    // The sequence so far, [B, T]: the prompts, then one more column per step.
    TypedBuffer<std::int32_t> sequence = upload_prompt_tokens(*allocator_, prompts, stream);
    const GreedyBuffers greedy(*allocator_, prompts, max_new_tokens, eos_token_id_, stream);

    GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    int steps = 0;
    while (steps < max_new_tokens) {
      NvtxRange step_range("step");
      // The whole forward pass over all B x T tokens, for the last position's logits.
      const TypedBuffer<float> step_logits = forward(step_, sequence, B, T);
      const TypedBuffer<std::int32_t> next_tokens = allocate<std::int32_t>(B);
      launch_argmax_step(step_logits, next_tokens, greedy.state(), B, config_.vocab_size, steps,
                         stream);
      logits.record(step_logits, B, config_.vocab_size, stream);

      // Append the new column as torch.cat does: a new [B, T + 1] buffer, the old copied in.
      TypedBuffer<std::int32_t> longer =
          allocate<std::int32_t>(static_cast<std::size_t>(B) * (T + 1));
      const std::size_t old_pitch = sizeof(std::int32_t) * T;
      const std::size_t new_pitch = sizeof(std::int32_t) * (T + 1);
      CUDA_CHECK(cudaMemcpy2DAsync(longer, new_pitch, sequence, old_pitch, old_pitch, B,
                                   cudaMemcpyDeviceToDevice, stream));
      CUDA_CHECK(cudaMemcpy2DAsync(longer + T, new_pitch, next_tokens, sizeof(std::int32_t),
                                   sizeof(std::int32_t), B, cudaMemcpyDeviceToDevice, stream));
      sequence = std::move(longer);
      ++T;
      ++steps;

      // The plain stopping check: a blocking read of the flag after every step.
      std::int32_t every_row_finished = 0;
      CUDA_CHECK(cudaMemcpyAsync(&every_row_finished, greedy.all_finished(), sizeof(std::int32_t),
                                 cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      ++output.host_syncs;
      if (every_row_finished) break;
    }

    output.loop_allocations = allocator_->stats().allocations - allocations_before_loop;
    output.steps = steps;
    output.tokens = greedy.download_tokens(steps, stream);
    return output;
  }

 private:
  template <typename T>
  TypedBuffer<T> allocate(std::size_t count) {
    return TypedBuffer<T>(*allocator_, count, step_.stream());
  }

  /// GPT-2 over tokens [B, T]: returns the logits of each row's last position, [B, V].
  TypedBuffer<float> forward(StepContext& step, const std::int32_t* tokens, int B, int T) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const TypedBuffer<float> hidden = allocate<float>(static_cast<std::size_t>(B) * T * C);
    launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(), hidden,
                              B, T, /*first_position=*/0, C, stream);
    layers(step, hidden, B * T, [&](int /*layer_index*/, const float* qkv) {
      TypedBuffer<float> attended = allocate<float>(static_cast<std::size_t>(B) * T * C);
      launch_causal_attention(qkv, attended, B, T, H, C, stream);
      return attended;
    });
    return lm_head(step, hidden, B, T);
  }

  /// GPT-2's layers over `rows` rows of the residual stream `hidden` [rows, C]:
  /// `attend(layer_index, qkv)` turns the layer's qkv [rows, 3C] into its attention
  /// output [rows, C]. Every activation is a fresh block from the allocator, as every
  /// PyTorch operator's output is.
  template <typename Attention>
  void layers(StepContext& step, float* hidden, int rows, const Attention& attend) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const std::size_t size = static_cast<std::size_t>(rows) * C;
    const float eps = config_.layer_norm_epsilon;
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const DeviceLayer layer = model_.layer(layer_index);
      {
        NvtxRange range("attention block");
        const TypedBuffer<float> normed = allocate<float>(size);
        launch_layernorm(hidden, layer.ln_1_weight, layer.ln_1_bias, normed, rows, C, eps, stream);
        const TypedBuffer<float> qkv = allocate<float>(3 * size);
        step.linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
                    LinearEpilogue::kBias);
        const TypedBuffer<float> attended = attend(layer_index, qkv);
        const TypedBuffer<float> projected = allocate<float>(size);
        step.linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, rows, C, C,
                    LinearEpilogue::kBias);
        launch_residual_add(hidden, projected, rows, C, stream);
      }
      {
        NvtxRange range("mlp block");
        const TypedBuffer<float> normed = allocate<float>(size);
        launch_layernorm(hidden, layer.ln_2_weight, layer.ln_2_bias, normed, rows, C, eps, stream);
        const TypedBuffer<float> expanded = allocate<float>(4 * size);
        step.linear(normed, layer.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
                    LinearEpilogue::kBias);
        launch_gelu(expanded, expanded, rows, 4 * C, stream);
        const TypedBuffer<float> projected = allocate<float>(size);
        step.linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, rows, 4 * C, C,
                    LinearEpilogue::kBias);
        launch_residual_add(hidden, projected, rows, C, stream);
      }
    }
  }

  /// ln_f and the tied LM head over each row's last position of the residual stream
  /// `hidden` [B, T, C]: returns the logits, [B, V].
  TypedBuffer<float> lm_head(StepContext& step, const float* hidden, int B, int T) {
    NvtxRange range("lm head");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    // Only each row's last position predicts the next token: with T > 1 those rows are
    // gathered first.
    TypedBuffer<float> gathered;
    const float* last = hidden;
    if (T > 1) {
      gathered = allocate<float>(static_cast<std::size_t>(B) * C);
      CUDA_CHECK(cudaMemcpy2DAsync(
          gathered, sizeof(float) * C, hidden + static_cast<std::size_t>(T - 1) * C,
          sizeof(float) * C * T, sizeof(float) * C, B, cudaMemcpyDeviceToDevice, stream));
      last = gathered;
    }
    const TypedBuffer<float> normed = allocate<float>(static_cast<std::size_t>(B) * C);
    launch_layernorm(last, model_.ln_f_weight(), model_.ln_f_bias(), normed, B, C,
                     config_.layer_norm_epsilon, stream);
    TypedBuffer<float> logits = allocate<float>(static_cast<std::size_t>(B) * config_.vocab_size);
    step.lm_head(normed, model_.token_embedding(), logits, B, C, config_.vocab_size);
    return logits;
  }

  const DeviceModel& model_;
  const Gpt2Config config_;
  const int eos_token_id_;
  std::unique_ptr<DeviceAllocator> allocator_;
  StepContext step_;
};

}  // namespace

int main(int argc, char** argv) {
  return run_chapter(argc, argv, {"01_naive_decode", "naive decode"}, make_decoder<Gpt2Decoder>);
}
