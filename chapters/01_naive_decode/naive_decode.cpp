// chapters/01_naive_decode/naive_decode.cpp - rung 01: naive decode.
//
// The seed's first loop, in C++. Every step runs the whole GPT-2 forward pass over
// every token so far - B rows of T tokens, T growing by one per step - to predict a
// single new token per row. The work per step grows with T and the total with N^2.
// Every activation is taken from a caching allocator modelled on PyTorch's, so the
// growing, short-lived buffers fragment its memory the way they do in PyTorch. After
// every step the host reads the "all rows finished" flag with a blocking copy.
//
// Run:      build/current/chapters/01_naive_decode              (B = 32; N = 100, 200, 400)
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/01_naive_decode --new-tokens 20
//           (each "step" range ends in a blocking device-to-host copy: the per-step sync)
//
// Notation: B rows, T tokens so far, C = n_embd, H heads, V vocabulary.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_stream.hpp"
#include "common/nvtx.hpp"
#include "kernels/attention.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using ladder::DeviceBuffer;

class NaiveDecoder final : public ladder::Decoder {
 public:
  NaiveDecoder(const ladder::DeviceModel& model, const ladder::DecoderOptions& options)
      : model_(model),
        config_(model.config()),
        eos_token_id_(options.eos_token_id),
        allocator_(ladder::make_device_allocator("caching")),
        stream_(),
        matmul_workspace_(*allocator_, ladder::LtMatmul::kRecommendedWorkspaceBytes, stream_.get()),
        matmul_(matmul_workspace_.as<void>(), matmul_workspace_.bytes(), options.allow_tf32) {}

  ladder::DeviceAllocator& allocator() override { return *allocator_; }

  ladder::GenerationOutput generate(const ladder::PromptBatch& prompts, int max_new_tokens,
                                    ladder::LogitsRecorder& logits) override {
    const int B = prompts.batch;
    const cudaStream_t stream = stream_.get();
    int T = prompts.length;

    // The sequence so far, [B, T]: the prompts, then one more column per step.
    DeviceBuffer sequence = allocate<std::int32_t>(static_cast<std::size_t>(B) * T);
    CUDA_CHECK(cudaMemcpyAsync(sequence.as<void>(), prompts.tokens.data(),
                               prompts.tokens.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                               stream));
    DeviceBuffer finished = allocate<std::int32_t>(B);
    DeviceBuffer all_finished = allocate<std::int32_t>(1);
    DeviceBuffer generated = allocate<std::int32_t>(static_cast<std::size_t>(B) * max_new_tokens);
    CUDA_CHECK(cudaMemsetAsync(finished.as<void>(), 0, finished.bytes(), stream));
    // Teacher forcing, for the tests only: ids to feed instead of the argmax, or null.
    const DeviceBuffer forced =
        ladder::upload_forced_tokens(*allocator_, prompts, max_new_tokens, stream);

    ladder::GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    int steps = 0;
    while (steps < max_new_tokens) {
      ladder::NvtxRange step_range("step");
      // The whole forward pass over all B x T tokens, for the last position's logits.
      DeviceBuffer step_logits = forward(sequence.as<std::int32_t>(), B, T);
      DeviceBuffer next_tokens = allocate<std::int32_t>(B);
      ladder::launch_argmax_step(step_logits.as<float>(), forced.as<std::int32_t>(),
                                 next_tokens.as<std::int32_t>(), finished.as<std::int32_t>(),
                                 all_finished.as<std::int32_t>(), generated.as<std::int32_t>(), B,
                                 config_.vocab_size, steps, max_new_tokens, eos_token_id_, stream);
      logits.record(step_logits.as<float>(), B, config_.vocab_size, stream);

      // Append the new column as torch.cat does: a new [B, T + 1] buffer, the old copied in.
      DeviceBuffer longer = allocate<std::int32_t>(static_cast<std::size_t>(B) * (T + 1));
      const std::size_t old_pitch = sizeof(std::int32_t) * T;
      const std::size_t new_pitch = sizeof(std::int32_t) * (T + 1);
      CUDA_CHECK(cudaMemcpy2DAsync(longer.as<void>(), new_pitch, sequence.as<void>(), old_pitch,
                                   old_pitch, B, cudaMemcpyDeviceToDevice, stream));
      CUDA_CHECK(cudaMemcpy2DAsync(longer.as<std::int32_t>() + T, new_pitch, next_tokens.as<void>(),
                                   sizeof(std::int32_t), sizeof(std::int32_t), B,
                                   cudaMemcpyDeviceToDevice, stream));
      sequence = std::move(longer);
      ++T;
      ++steps;

      // The seed's stopping check: a blocking read of the flag after every step.
      std::int32_t every_row_finished = 0;
      CUDA_CHECK(cudaMemcpyAsync(&every_row_finished, all_finished.as<void>(), sizeof(std::int32_t),
                                 cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      ++output.host_syncs;
      if (every_row_finished) break;
    }

    output.loop_allocations = allocator_->stats().allocations - allocations_before_loop;
    output.steps = steps;
    output.tokens = ladder::download_generated_tokens(generated.as<std::int32_t>(), B,
                                                      max_new_tokens, steps, stream);
    return output;
  }

 private:
  template <typename T>
  DeviceBuffer allocate(std::size_t count) {
    return DeviceBuffer(*allocator_, count * sizeof(T), stream_.get());
  }

  /// GPT-2 over tokens [B, T]: returns the logits of each row's last position, [B, V].
  DeviceBuffer forward(const std::int32_t* tokens, int B, int T) {
    const cudaStream_t stream = stream_.get();
    const int C = config_.n_embd;
    const int rows = B * T;
    const float eps = config_.layer_norm_epsilon;

    DeviceBuffer hidden = allocate<float>(static_cast<std::size_t>(rows) * C);
    ladder::launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(),
                                      hidden.as<float>(), B, T, /*first_position=*/0, C, stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ladder::DeviceLayer layer = model_.layer(layer_index);
      {
        ladder::NvtxRange range("attention block");
        DeviceBuffer normed = allocate<float>(static_cast<std::size_t>(rows) * C);
        ladder::launch_layernorm(hidden.as<float>(), layer.ln_1_weight, layer.ln_1_bias,
                                 normed.as<float>(), rows, C, eps, stream);
        DeviceBuffer qkv = allocate<float>(static_cast<std::size_t>(rows) * 3 * C);
        linear(normed.as<float>(), layer.qkv_weight, layer.qkv_bias, qkv.as<float>(), rows, C,
               3 * C);
        DeviceBuffer attended = allocate<float>(static_cast<std::size_t>(rows) * C);
        ladder::launch_causal_attention(qkv.as<float>(), attended.as<float>(), B, T, config_.n_head,
                                        C, stream);
        DeviceBuffer projected = allocate<float>(static_cast<std::size_t>(rows) * C);
        linear(attended.as<float>(), layer.attn_proj_weight, layer.attn_proj_bias,
               projected.as<float>(), rows, C, C);
        ladder::launch_residual_add(hidden.as<float>(), projected.as<float>(), rows, C, stream);
      }
      {
        ladder::NvtxRange range("mlp block");
        DeviceBuffer normed = allocate<float>(static_cast<std::size_t>(rows) * C);
        ladder::launch_layernorm(hidden.as<float>(), layer.ln_2_weight, layer.ln_2_bias,
                                 normed.as<float>(), rows, C, eps, stream);
        DeviceBuffer expanded = allocate<float>(static_cast<std::size_t>(rows) * 4 * C);
        linear(normed.as<float>(), layer.fc_weight, layer.fc_bias, expanded.as<float>(), rows, C,
               4 * C);
        ladder::launch_gelu(expanded.as<float>(), expanded.as<float>(), rows, 4 * C, stream);
        DeviceBuffer projected = allocate<float>(static_cast<std::size_t>(rows) * C);
        linear(expanded.as<float>(), layer.mlp_proj_weight, layer.mlp_proj_bias,
               projected.as<float>(), rows, 4 * C, C);
        ladder::launch_residual_add(hidden.as<float>(), projected.as<float>(), rows, C, stream);
      }
    }

    ladder::NvtxRange range("lm head");
    // Only each row's last position predicts the next token.
    DeviceBuffer last = allocate<float>(static_cast<std::size_t>(B) * C);
    CUDA_CHECK(cudaMemcpy2DAsync(last.as<void>(), sizeof(float) * C,
                                 hidden.as<float>() + static_cast<std::size_t>(T - 1) * C,
                                 sizeof(float) * C * T, sizeof(float) * C, B,
                                 cudaMemcpyDeviceToDevice, stream));
    DeviceBuffer normed = allocate<float>(static_cast<std::size_t>(B) * C);
    ladder::launch_layernorm(last.as<float>(), model_.ln_f_weight(), model_.ln_f_bias(),
                             normed.as<float>(), B, C, eps, stream);
    DeviceBuffer logits = allocate<float>(static_cast<std::size_t>(B) * config_.vocab_size);
    matmul_.lm_head(normed.as<float>(), model_.token_embedding(), logits.as<float>(), B, C,
                    config_.vocab_size, stream);
    return logits;
  }

  /// out = x W + b through cuBLASLt, the bias added in the matmul's epilogue as
  /// PyTorch's addmm adds it for Hugging Face's Conv1D (one launch, or two when cuBLASLt
  /// splits the inner dimension and sums the slices in a second kernel).
  void linear(const float* x, const float* weight, const float* bias, float* out, int rows,
              int in_features, int out_features) {
    matmul_.linear(x, weight, bias, out, rows, in_features, out_features,
                   ladder::LinearEpilogue::kBias, stream_.get());
  }

  const ladder::DeviceModel& model_;
  const ladder::Gpt2Config config_;
  const int eos_token_id_;
  std::unique_ptr<ladder::DeviceAllocator> allocator_;
  ladder::CudaStream stream_;
  DeviceBuffer matmul_workspace_;
  ladder::LtMatmul matmul_;
};

}  // namespace

int main(int argc, char** argv) {
  return ladder::run_chapter(argc, argv, {"01_naive_decode", "naive decode"},
                             ladder::make_decoder<NaiveDecoder>);
}
