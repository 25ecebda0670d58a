// chapters/02_kv_cache/kv_cache.cpp - rung 02: a KV cache, grown like Hugging Face's.
//
// Chapter 01 recomputed the keys and values of every past token at every step. Here
// each layer keeps them: step 0 runs the prompt through the model once (the prefill)
// and stores every position's keys and values; every later step feeds ONE token per
// row, appends its keys and values, and lets its query attend over the cache. The
// work per step no longer grows with T; only attention's reads of the cache do.
// The cache grows the way Hugging Face's DynamicCache grows it (torch.cat): every
// step, every layer takes a buffer one position longer from the caching allocator,
// copies the old keys and values in and frees the old buffer. That copy, and the
// churn of ever longer blocks through the allocator, are this chapter's cost;
// chapters 03 and 04 remove them.
//
// Run:      build/current/chapters/02_kv_cache              (B = 32; N = 100, 200, 400)
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/02_kv_cache --new-tokens 20
//           (step 0 holds the "prefill" range; every later step 12 "grow kv cache" ranges)
//
// Notation: B rows, T prompt tokens, L cached positions, C = n_embd, H heads,
// D = C / H, V vocabulary.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <utility>
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

// NEW in chapter 02: per layer, the keys and values of every position so far.
struct KvCache {
  std::vector<DeviceBuffer> keys;    ///< per layer, [B, H, length, D]
  std::vector<DeviceBuffer> values;  ///< per layer, [B, H, length, D]
  int length = 0;                    ///< L: positions cached
};

class KvCacheDecoder final : public ladder::Decoder {
 public:
  KvCacheDecoder(const ladder::DeviceModel& model, const ladder::DecoderOptions& options)
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
    const int T = prompts.length;

    // The prompts, [B, T]; only the prefill reads them.
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
    KvCache cache;
    DeviceBuffer next_tokens;
    int steps = 0;
    while (steps < max_new_tokens) {
      ladder::NvtxRange step_range("step");
      // NEW in chapter 02: step 0 runs the whole prompt once and fills the cache; every
      // later step feeds only the tokens the step before chose, one per row.
      DeviceBuffer step_logits = steps == 0 ? prefill(sequence.as<std::int32_t>(), B, T, cache)
                                            : decode_step(next_tokens.as<std::int32_t>(), B, cache);
      next_tokens = allocate<std::int32_t>(B);
      ladder::launch_argmax_step(step_logits.as<float>(), forced.as<std::int32_t>(),
                                 next_tokens.as<std::int32_t>(), finished.as<std::int32_t>(),
                                 all_finished.as<std::int32_t>(), generated.as<std::int32_t>(), B,
                                 config_.vocab_size, steps, max_new_tokens, eos_token_id_, stream);
      logits.record(step_logits.as<float>(), B, config_.vocab_size, stream);
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

  /// GPT-2 over the prompts [B, T]: returns the logits of each row's last position, [B, V],
  /// and leaves every layer's keys and values of the T positions in `cache`.
  DeviceBuffer prefill(const std::int32_t* tokens, int B, int T, KvCache& cache) {
    ladder::NvtxRange prefill_range("prefill");
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
        // NEW in chapter 02: this layer's keys and values of positions 0 .. T - 1 stay.
        cache.keys.push_back(allocate<float>(static_cast<std::size_t>(rows) * C));
        cache.values.push_back(allocate<float>(static_cast<std::size_t>(rows) * C));
        ladder::launch_store_kv_sequence(qkv.as<float>(), cache.keys.back().as<float>(),
                                         cache.values.back().as<float>(), /*first_position=*/0, T,
                                         /*capacity=*/T, B, config_.n_head, C, stream);
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
    cache.length = T;

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

  // NEW in chapter 02: a decode step, the same GPT-2 over ONE token per row.
  /// GPT-2 over tokens [B], which sit at position L = cache.length: every layer appends
  /// their keys and values to the cache and attends over all L + 1 positions. Returns
  /// the logits, [B, V].
  DeviceBuffer decode_step(const std::int32_t* tokens, int B, KvCache& cache) {
    const cudaStream_t stream = stream_.get();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const int L = cache.length;
    const float eps = config_.layer_norm_epsilon;

    DeviceBuffer hidden = allocate<float>(static_cast<std::size_t>(B) * C);
    ladder::launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(),
                                      hidden.as<float>(), B, /*T=*/1, /*first_position=*/L, C,
                                      stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ladder::DeviceLayer layer = model_.layer(layer_index);
      {
        ladder::NvtxRange range("attention block");
        DeviceBuffer normed = allocate<float>(static_cast<std::size_t>(B) * C);
        ladder::launch_layernorm(hidden.as<float>(), layer.ln_1_weight, layer.ln_1_bias,
                                 normed.as<float>(), B, C, eps, stream);
        DeviceBuffer qkv = allocate<float>(static_cast<std::size_t>(B) * 3 * C);
        linear(normed.as<float>(), layer.qkv_weight, layer.qkv_bias, qkv.as<float>(), B, C, 3 * C);
        grow_kv_cache(cache, layer_index, qkv.as<float>(), B, L);
        DeviceBuffer attended = allocate<float>(static_cast<std::size_t>(B) * C);
        // The query is read in place from the q third of qkv (rows 3C apart).
        ladder::launch_decode_attention(qkv.as<float>(), 3 * C, cache.keys[layer_index].as<float>(),
                                        cache.values[layer_index].as<float>(), attended.as<float>(),
                                        B, /*L=*/L + 1, /*capacity=*/L + 1, H, C, stream);
        DeviceBuffer projected = allocate<float>(static_cast<std::size_t>(B) * C);
        linear(attended.as<float>(), layer.attn_proj_weight, layer.attn_proj_bias,
               projected.as<float>(), B, C, C);
        ladder::launch_residual_add(hidden.as<float>(), projected.as<float>(), B, C, stream);
      }
      {
        ladder::NvtxRange range("mlp block");
        DeviceBuffer normed = allocate<float>(static_cast<std::size_t>(B) * C);
        ladder::launch_layernorm(hidden.as<float>(), layer.ln_2_weight, layer.ln_2_bias,
                                 normed.as<float>(), B, C, eps, stream);
        DeviceBuffer expanded = allocate<float>(static_cast<std::size_t>(B) * 4 * C);
        linear(normed.as<float>(), layer.fc_weight, layer.fc_bias, expanded.as<float>(), B, C,
               4 * C);
        ladder::launch_gelu(expanded.as<float>(), expanded.as<float>(), B, 4 * C, stream);
        DeviceBuffer projected = allocate<float>(static_cast<std::size_t>(B) * C);
        linear(expanded.as<float>(), layer.mlp_proj_weight, layer.mlp_proj_bias,
               projected.as<float>(), B, 4 * C, C);
        ladder::launch_residual_add(hidden.as<float>(), projected.as<float>(), B, C, stream);
      }
    }
    cache.length = L + 1;

    ladder::NvtxRange range("lm head");
    DeviceBuffer normed = allocate<float>(static_cast<std::size_t>(B) * C);
    ladder::launch_layernorm(hidden.as<float>(), model_.ln_f_weight(), model_.ln_f_bias(),
                             normed.as<float>(), B, C, eps, stream);
    DeviceBuffer logits = allocate<float>(static_cast<std::size_t>(B) * config_.vocab_size);
    matmul_.lm_head(normed.as<float>(), model_.token_embedding(), logits.as<float>(), B, C,
                    config_.vocab_size, stream);
    return logits;
  }

  // NEW in chapter 02: the cache grows as Hugging Face's DynamicCache grows it
  // (torch.cat): new [B, H, L + 1, D] buffers from the allocator, the L cached positions
  // copied in and the step's keys and values written at L, in one launch; assigning the
  // new buffers over the old ones frees those. Keys and values of every layer, every
  // step: 2 * n_layer * B * L * C * 4 bytes read and written again.
  void grow_kv_cache(KvCache& cache, int layer_index, const float* qkv, int B, int L) {
    ladder::NvtxRange range("grow kv cache");
    const int C = config_.n_embd;
    const std::size_t size = static_cast<std::size_t>(B) * (L + 1) * C;
    DeviceBuffer keys = allocate<float>(size);
    DeviceBuffer values = allocate<float>(size);
    ladder::launch_grow_kv_cache(qkv, cache.keys[layer_index].as<float>(),
                                 cache.values[layer_index].as<float>(), keys.as<float>(),
                                 values.as<float>(), L, B, config_.n_head, C, stream_.get());
    cache.keys[layer_index] = std::move(keys);
    cache.values[layer_index] = std::move(values);
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
  return ladder::run_chapter(argc, argv, {"02_kv_cache", "KV cache"},
                             ladder::make_decoder<KvCacheDecoder>);
}
