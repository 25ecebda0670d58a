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

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/greedy_decoding.hpp"
#include "common/nvtx.hpp"
#include "common/step_context.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

// NEW in chapter 04: room for the keys and values of every position the run can reach,
// every layer's in one block, allocated once and zeroed (masked positions must hold
// finite numbers).
struct StaticKvCache {
  TypedBuffer<float> keys;       ///< [n_layer, B, H, capacity, D]
  TypedBuffer<float> values;     ///< [n_layer, B, H, capacity, D]
  int capacity = 0;              ///< T + N positions
  std::size_t layer_floats = 0;  ///< B * capacity * C: one layer's keys (or values)

  float* layer_keys(int layer_index) const { return keys + layer_index * layer_floats; }
  float* layer_values(int layer_index) const { return values + layer_index * layer_floats; }
};

// NEW in chapter 04: every activation of a step, allocated once, sized for the
// prefill's B x T rows; a decode step uses the first B rows.
struct Activations {
  TypedBuffer<float> hidden;     ///< [rows, C], the residual stream
  TypedBuffer<float> normed;     ///< [rows, C], a LayerNorm's output
  TypedBuffer<float> qkv;        ///< [rows, 3C]
  TypedBuffer<float> attended;   ///< [rows, C]
  TypedBuffer<float> projected;  ///< [rows, C], c_proj's output (attention and MLP)
  TypedBuffer<float> expanded;   ///< [rows, 4C], the MLP's hidden layer
  TypedBuffer<float> last;       ///< [B, C], each row's last prompt position
  TypedBuffer<float> logits;     ///< [B, V]
};

class Gpt2Decoder final : public Decoder {
 public:
  Gpt2Decoder(const DeviceModel& model, const DecoderOptions& options)
      : model_(model),
        config_(model.config()),
        eos_token_id_(options.eos_token_id),
        // NEW in chapter 04: back to the default caching allocator. Nothing grows any more
        // and nothing is allocated in the loop, so there is nothing left for it to strand.
        allocator_(make_device_allocator("caching")),
        step_(*allocator_, options.allow_tf32) {}

  DeviceAllocator& allocator() override { return *allocator_; }

  GenerationOutput generate(const PromptBatch& prompts, int max_new_tokens,
                            LogitsRecorder& logits) override {
    const int B = prompts.batch;
    const int T = prompts.length;
    const cudaStream_t stream = step_.stream();

    // The prompts, [B, T]; only the prefill reads them.
    const TypedBuffer<std::int32_t> sequence = upload_prompt_tokens(*allocator_, prompts, stream);
    const GreedyBuffers greedy(*allocator_, prompts, max_new_tokens, eos_token_id_, stream);
    // NEW in chapter 04: everything the loop touches is allocated here, once, for the
    // longest the run can get (Hugging Face's StaticCache: max_cache_len = T + N).
    const StaticKvCache cache = allocate_kv_cache(B, T + max_new_tokens, stream);
    const Activations activations = allocate_activations(B, T);
    const TypedBuffer<std::int32_t> next_tokens = allocate<std::int32_t>(B);
    // NEW in chapter 04: where the loop stands lives on the device. Step 0 (the prefill)
    // predicts from the prompt's last token, at position T - 1; every argmax advances it.
    const TypedBuffer<DecodePosition> cursor = allocate<DecodePosition>(1);
    const DecodePosition start{/*step=*/0, /*position=*/T - 1};
    CUDA_CHECK(cudaMemcpyAsync(cursor, &start, sizeof(start), cudaMemcpyHostToDevice, stream));

    GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    int steps = 0;
    while (steps < max_new_tokens) {
      NvtxRange step_range("step");
      // Step 0 runs the whole prompt once and fills the cache; every
      // later step feeds only the tokens the step before chose, one per row.
      const float* step_logits =
          steps == 0 ? prefill(step_, sequence, B, T, cache, activations)
                     : decode_step(step_, next_tokens, cursor, B, cache, activations);
      // NEW in chapter 04: the argmax takes the step from the cursor and advances it.
      launch_argmax_step(step_logits, next_tokens, greedy.state(), cursor, B, config_.vocab_size,
                         stream);
      logits.record(step_logits, B, config_.vocab_size, stream);
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

  // The table's yardstick: this step's 49 products alone (common/step_context.hpp).
  double matmul_seconds_per_step(int batch) override {
    return decode_matmul_seconds(model_, step_, *allocator_, batch, LinearEpilogue::kBias);
  }

 private:
  template <typename T>
  TypedBuffer<T> allocate(std::size_t count) {
    return TypedBuffer<T>(*allocator_, count, step_.stream());
  }

  // NEW in chapter 04: the whole cache at once, zeroed as torch.zeros does in StaticCache:
  // attention reads every position, and a masked one must still hold a finite number.
  StaticKvCache allocate_kv_cache(int B, int capacity, cudaStream_t stream) {
    StaticKvCache cache;
    cache.capacity = capacity;
    cache.layer_floats = static_cast<std::size_t>(B) * capacity * config_.n_embd;
    cache.keys = allocate<float>(config_.n_layer * cache.layer_floats);
    cache.values = allocate<float>(config_.n_layer * cache.layer_floats);
    CUDA_CHECK(cudaMemsetAsync(cache.keys, 0, cache.keys.bytes(), stream));
    CUDA_CHECK(cudaMemsetAsync(cache.values, 0, cache.values.bytes(), stream));
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
  float* prefill(StepContext& step, const std::int32_t* tokens, int B, int T,
                 const StaticKvCache& cache, const Activations& activations) {
    NvtxRange prefill_range("prefill");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(),
                              activations.hidden, B, T, /*first_position=*/0, C, stream);
    layers(step, activations, B * T, [&](int layer_index, const float* qkv, float* attended) {
      // This layer's keys and values of positions 0 .. T - 1 stay, in the static cache.
      launch_store_kv_sequence(qkv, cache.layer_keys(layer_index), cache.layer_values(layer_index),
                               /*first_position=*/0, T, cache.capacity, B, H, C, stream);
      launch_causal_attention(qkv, attended, B, T, H, C, stream);
    });
    return lm_head(step, activations, B, T);
  }

  // NEW in chapter 04: the decode step reads its position from the cursor on the device.
  /// GPT-2 over tokens [B], which sit at position p = cursor->position: every layer
  /// writes their keys and values at p of the static cache and attends over all of it,
  /// positions after p masked. Returns the logits, [B, V] (in activations.logits).
  float* decode_step(StepContext& step, const std::int32_t* tokens, const DecodePosition* cursor,
                     int B, const StaticKvCache& cache, const Activations& activations) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    launch_embedding_at_cursor(tokens, cursor, model_.token_embedding(),
                               model_.position_embedding(), activations.hidden, B, C, stream);
    layers(step, activations, B, [&](int layer_index, const float* qkv, float* attended) {
      float* keys = cache.layer_keys(layer_index);
      float* values = cache.layer_values(layer_index);
      // Nothing grows, nothing is copied: the step's keys and values go to position p.
      launch_append_kv_at_cursor(qkv, keys, values, cursor, cache.capacity, B, H, C, stream);
      // The query is read in place from the q third of qkv (rows 3C apart); all
      // capacity positions are scored, those after p masked, as in StaticCache.
      launch_static_cache_attention(qkv, 3 * C, keys, values, cursor, cache.capacity, attended, B,
                                    H, C, stream);
    });
    return lm_head(step, activations, B, /*T=*/1);
  }

  /// GPT-2's layers over `rows` rows of the residual stream (activations.hidden,
  /// [rows, C]), the same for the prefill and a decode step but for attention:
  /// `attend(layer_index, qkv, attended)` turns the layer's qkv [rows, 3C] into its
  /// attention output [rows, C].
  template <typename Attention>
  void layers(StepContext& step, const Activations& activations, int rows,
              const Attention& attend) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const float eps = config_.layer_norm_epsilon;
    float* hidden = activations.hidden;
    float* normed = activations.normed;
    float* qkv = activations.qkv;
    float* attended = activations.attended;
    float* projected = activations.projected;
    float* expanded = activations.expanded;
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const DeviceLayer layer = model_.layer(layer_index);
      {
        NvtxRange range("attention block");
        launch_layernorm(hidden, layer.ln_1_weight, layer.ln_1_bias, normed, rows, C, eps, stream);
        step.linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
                    LinearEpilogue::kBias);
        attend(layer_index, qkv, attended);
        step.linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, rows, C, C,
                    LinearEpilogue::kBias);
        launch_residual_add(hidden, projected, rows, C, stream);
      }
      {
        NvtxRange range("mlp block");
        launch_layernorm(hidden, layer.ln_2_weight, layer.ln_2_bias, normed, rows, C, eps, stream);
        step.linear(normed, layer.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
                    LinearEpilogue::kBias);
        launch_gelu(expanded, expanded, rows, 4 * C, stream);
        step.linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, rows, 4 * C, C,
                    LinearEpilogue::kBias);
        launch_residual_add(hidden, projected, rows, C, stream);
      }
    }
  }

  /// ln_f and the tied LM head over each row's last position of the residual stream
  /// [B, T, C]: returns the logits, [B, V] (in activations.logits).
  float* lm_head(StepContext& step, const Activations& activations, int B, int T) {
    NvtxRange range("lm head");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    // Only each row's last position predicts the next token: with T > 1 (the prefill)
    // those rows are gathered first.
    const float* last = activations.hidden;
    if (T > 1) {
      CUDA_CHECK(cudaMemcpy2DAsync(activations.last, sizeof(float) * C,
                                   activations.hidden + static_cast<std::size_t>(T - 1) * C,
                                   sizeof(float) * C * T, sizeof(float) * C, B,
                                   cudaMemcpyDeviceToDevice, stream));
      last = activations.last;
    }
    launch_layernorm(last, model_.ln_f_weight(), model_.ln_f_bias(), activations.normed, B, C,
                     config_.layer_norm_epsilon, stream);
    step.lm_head(activations.normed, model_.token_embedding(), activations.logits, B, C,
                 config_.vocab_size);
    return activations.logits;
  }

  const DeviceModel& model_;
  const Gpt2Config config_;
  const int eos_token_id_;
  std::unique_ptr<DeviceAllocator> allocator_;
  StepContext step_;
};

}  // namespace

int main(int argc, char** argv) {
  return run_chapter(argc, argv, {"04_static_cache", "static KV cache"}, make_decoder<Gpt2Decoder>);
}
