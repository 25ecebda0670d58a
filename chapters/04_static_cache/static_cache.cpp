// chapters/04_static_cache/static_cache.cpp - rung 04: a static KV cache, every buffer
// allocated once.
//
// Chapters 02 and 03 grew the KV cache by one position every step: a new buffer, a
// copy of the old one, a free; and every activation of every step was a fresh
// allocation. Here the cache is allocated once per generate() for the longest the run
// can get (prompt + new tokens), as Hugging Face's StaticCache does, and so is every
// other buffer the loop touches: the loop itself allocates nothing (the table's
// alloc/step is 0). The current step and position live in device memory (a
// DecodePosition): the step's kernels read them and the argmax advances them, so the
// host passes nothing that changes from step to step. The price: attention runs over
// the WHOLE cache every step, the positions not yet written masked out, so early
// steps read mostly unused cache. Chapter 05 attends over the valid length only.
//
// Run:      build/current/chapters/04_static_cache              (B = 32; N = 100, 200, 400)
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/04_static_cache --new-tokens 20
//           (no "grow kv cache" ranges; static_cache_attention_kernel takes as long at
//           step 1 as at the last step: it always reads the whole cache)
//
// Notation: B rows, T prompt tokens, N new tokens, capacity = T + N cached positions,
// C = n_embd, H heads, D = C / H, V vocabulary.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_stream.hpp"
#include "common/nvtx.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using ladder::DeviceBuffer;

// NEW in chapter 04: per layer, room for the keys and values of every position the run
// can reach, allocated once and zeroed (masked positions must hold finite numbers).
struct StaticKvCache {
  std::vector<DeviceBuffer> keys;    ///< per layer, [B, H, capacity, D]
  std::vector<DeviceBuffer> values;  ///< per layer, [B, H, capacity, D]
  int capacity = 0;                  ///< T + N positions
};

// NEW in chapter 04: every activation of a step, allocated once, sized for the
// prefill's B x T rows; a decode step uses the first B rows.
struct Activations {
  DeviceBuffer hidden;     ///< [rows, C], the residual stream
  DeviceBuffer normed;     ///< [rows, C], a LayerNorm's output
  DeviceBuffer qkv;        ///< [rows, 3C]
  DeviceBuffer attended;   ///< [rows, C]
  DeviceBuffer projected;  ///< [rows, C], c_proj's output (attention and MLP)
  DeviceBuffer expanded;   ///< [rows, 4C], the MLP's hidden layer
  DeviceBuffer last;       ///< [B, C], each row's last prompt position
  DeviceBuffer logits;     ///< [B, V]
};

class StaticCacheDecoder final : public ladder::Decoder {
 public:
  StaticCacheDecoder(const ladder::DeviceModel& model, const ladder::DecoderOptions& options)
      : model_(model),
        config_(model.config()),
        eos_token_id_(options.eos_token_id),
        // NEW in chapter 04: back to the default caching allocator. Nothing grows any more
        // and nothing is allocated in the loop, so there is nothing left for it to strand.
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
    // NEW in chapter 04: everything the loop touches is allocated here, once, for the
    // longest the run can get (Hugging Face's StaticCache: max_cache_len = T + N).
    StaticKvCache cache = allocate_kv_cache(B, T + max_new_tokens);
    Activations activations = allocate_activations(B, T);
    DeviceBuffer next_tokens = allocate<std::int32_t>(B);
    // NEW in chapter 04: where the loop stands lives on the device. Step 0 (the prefill)
    // predicts from the prompt's last token, at position T - 1; every argmax advances it.
    DeviceBuffer cursor = allocate<ladder::DecodePosition>(1);
    const ladder::DecodePosition start{/*step=*/0, /*position=*/T - 1};
    CUDA_CHECK(
        cudaMemcpyAsync(cursor.as<void>(), &start, sizeof(start), cudaMemcpyHostToDevice, stream));

    ladder::GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    int steps = 0;
    while (steps < max_new_tokens) {
      ladder::NvtxRange step_range("step");
      // NEW in chapter 02: step 0 runs the whole prompt once and fills the cache; every
      // later step feeds only the tokens the step before chose, one per row.
      const float* step_logits =
          steps == 0 ? prefill(sequence.as<std::int32_t>(), B, T, cache, activations)
                     : decode_step(next_tokens.as<std::int32_t>(),
                                   cursor.as<ladder::DecodePosition>(), B, cache, activations);
      // NEW in chapter 04: the argmax takes the step from the cursor and advances it.
      ladder::launch_argmax_step(step_logits, forced.as<std::int32_t>(),
                                 next_tokens.as<std::int32_t>(), finished.as<std::int32_t>(),
                                 all_finished.as<std::int32_t>(), generated.as<std::int32_t>(),
                                 cursor.as<ladder::DecodePosition>(), B, config_.vocab_size,
                                 max_new_tokens, eos_token_id_, stream);
      logits.record(step_logits, B, config_.vocab_size, stream);
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

  // NEW in chapter 04: the whole cache at once, zeroed as torch.zeros does in StaticCache:
  // attention reads every position, and a masked one must still hold a finite number.
  StaticKvCache allocate_kv_cache(int B, int capacity) {
    StaticKvCache cache;
    cache.capacity = capacity;
    const std::size_t size = static_cast<std::size_t>(B) * capacity * config_.n_embd;
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      cache.keys.push_back(allocate<float>(size));
      cache.values.push_back(allocate<float>(size));
      CUDA_CHECK(cudaMemsetAsync(cache.keys.back().as<void>(), 0, cache.keys.back().bytes(),
                                 stream_.get()));
      CUDA_CHECK(cudaMemsetAsync(cache.values.back().as<void>(), 0, cache.values.back().bytes(),
                                 stream_.get()));
    }
    return cache;
  }

  // NEW in chapter 04: one buffer per kind of activation, big enough for the prefill.
  Activations allocate_activations(int B, int T) {
    const std::size_t rows = static_cast<std::size_t>(B) * T;
    const std::size_t C = static_cast<std::size_t>(config_.n_embd);
    Activations activations;
    activations.hidden = allocate<float>(rows * C);
    activations.normed = allocate<float>(rows * C);
    activations.qkv = allocate<float>(rows * 3 * C);
    activations.attended = allocate<float>(rows * C);
    activations.projected = allocate<float>(rows * C);
    activations.expanded = allocate<float>(rows * 4 * C);
    activations.last = allocate<float>(static_cast<std::size_t>(B) * C);
    activations.logits = allocate<float>(static_cast<std::size_t>(B) * config_.vocab_size);
    return activations;
  }

  /// GPT-2 over the prompts [B, T]: returns the logits of each row's last position, [B, V]
  /// (in activations.logits), and leaves every layer's keys and values of the T positions
  /// in cache positions 0 .. T - 1.
  float* prefill(const std::int32_t* tokens, int B, int T, StaticKvCache& cache,
                 const Activations& activations) {
    ladder::NvtxRange prefill_range("prefill");
    const cudaStream_t stream = stream_.get();
    const int C = config_.n_embd;
    const int rows = B * T;
    const float eps = config_.layer_norm_epsilon;
    float* hidden = activations.hidden.as<float>();
    float* normed = activations.normed.as<float>();
    float* qkv = activations.qkv.as<float>();
    float* attended = activations.attended.as<float>();
    float* projected = activations.projected.as<float>();
    float* expanded = activations.expanded.as<float>();

    ladder::launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(),
                                      hidden, B, T, /*first_position=*/0, C, stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ladder::DeviceLayer layer = model_.layer(layer_index);
      {
        ladder::NvtxRange range("attention block");
        ladder::launch_layernorm(hidden, layer.ln_1_weight, layer.ln_1_bias, normed, rows, C, eps,
                                 stream);
        linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C);
        // This layer's keys and values of positions 0 .. T - 1 stay, in the static cache.
        ladder::launch_store_kv_sequence(
            qkv, cache.keys[layer_index].as<float>(), cache.values[layer_index].as<float>(),
            /*first_position=*/0, T, cache.capacity, B, config_.n_head, C, stream);
        ladder::launch_causal_attention(qkv, attended, B, T, config_.n_head, C, stream);
        linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, rows, C, C);
        ladder::launch_residual_add(hidden, projected, rows, C, stream);
      }
      {
        ladder::NvtxRange range("mlp block");
        ladder::launch_layernorm(hidden, layer.ln_2_weight, layer.ln_2_bias, normed, rows, C, eps,
                                 stream);
        linear(normed, layer.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C);
        ladder::launch_gelu(expanded, expanded, rows, 4 * C, stream);
        linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, rows, 4 * C, C);
        ladder::launch_residual_add(hidden, projected, rows, C, stream);
      }
    }

    ladder::NvtxRange range("lm head");
    // Only each row's last position predicts the next token.
    float* last = activations.last.as<float>();
    CUDA_CHECK(cudaMemcpy2DAsync(
        last, sizeof(float) * C, hidden + static_cast<std::size_t>(T - 1) * C,
        sizeof(float) * C * T, sizeof(float) * C, B, cudaMemcpyDeviceToDevice, stream));
    ladder::launch_layernorm(last, model_.ln_f_weight(), model_.ln_f_bias(), normed, B, C, eps,
                             stream);
    float* logits = activations.logits.as<float>();
    matmul_.lm_head(normed, model_.token_embedding(), logits, B, C, config_.vocab_size, stream);
    return logits;
  }

  // NEW in chapter 04: the decode step reads its position from the cursor on the device.
  /// GPT-2 over tokens [B], which sit at position p = cursor->position: every layer
  /// writes their keys and values at p of the static cache and attends over all of it,
  /// positions after p masked. Returns the logits, [B, V] (in activations.logits).
  float* decode_step(const std::int32_t* tokens, const ladder::DecodePosition* cursor, int B,
                     StaticKvCache& cache, const Activations& activations) {
    const cudaStream_t stream = stream_.get();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const float eps = config_.layer_norm_epsilon;
    float* hidden = activations.hidden.as<float>();
    float* normed = activations.normed.as<float>();
    float* qkv = activations.qkv.as<float>();
    float* attended = activations.attended.as<float>();
    float* projected = activations.projected.as<float>();
    float* expanded = activations.expanded.as<float>();

    ladder::launch_embedding_at_cursor(tokens, cursor, model_.token_embedding(),
                                       model_.position_embedding(), hidden, B, C, stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ladder::DeviceLayer layer = model_.layer(layer_index);
      float* keys = cache.keys[layer_index].as<float>();
      float* values = cache.values[layer_index].as<float>();
      {
        ladder::NvtxRange range("attention block");
        ladder::launch_layernorm(hidden, layer.ln_1_weight, layer.ln_1_bias, normed, B, C, eps,
                                 stream);
        linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, B, C, 3 * C);
        // Nothing grows, nothing is copied: the step's keys and values go to position p.
        ladder::launch_append_kv_at_cursor(qkv, keys, values, cursor, cache.capacity, B, H, C,
                                           stream);
        // The query is read in place from the q third of qkv (rows 3C apart); all
        // capacity positions are scored, those after p masked, as in StaticCache.
        ladder::launch_static_cache_attention(qkv, 3 * C, keys, values, cursor, cache.capacity,
                                              attended, B, H, C, stream);
        linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, B, C, C);
        ladder::launch_residual_add(hidden, projected, B, C, stream);
      }
      {
        ladder::NvtxRange range("mlp block");
        ladder::launch_layernorm(hidden, layer.ln_2_weight, layer.ln_2_bias, normed, B, C, eps,
                                 stream);
        linear(normed, layer.fc_weight, layer.fc_bias, expanded, B, C, 4 * C);
        ladder::launch_gelu(expanded, expanded, B, 4 * C, stream);
        linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, B, 4 * C, C);
        ladder::launch_residual_add(hidden, projected, B, C, stream);
      }
    }

    ladder::NvtxRange range("lm head");
    ladder::launch_layernorm(hidden, model_.ln_f_weight(), model_.ln_f_bias(), normed, B, C, eps,
                             stream);
    float* logits = activations.logits.as<float>();
    matmul_.lm_head(normed, model_.token_embedding(), logits, B, C, config_.vocab_size, stream);
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
  return ladder::run_chapter(argc, argv, {"04_static_cache", "static KV cache"},
                             ladder::make_decoder<StaticCacheDecoder>);
}
