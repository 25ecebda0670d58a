// chapters/03_expandable_allocator/expandable_allocator.cpp - rung 03: the same decode
// loop as chapter 02, on an allocator whose segments grow in place.
//
// Nothing in the loop changes: every step still takes each layer's KV cache one
// position longer from the allocator, copies the old one in and frees it. What
// changes is where that memory comes from. Chapter 02's caching allocator carves
// blocks out of fixed-size cudaMalloc segments; a cache that outgrew its block
// cannot reuse it, and a segment cannot be given back while any block in it is
// live, so reserved memory climbs far above what is allocated. The expandable
// allocator (common/expandable_allocator.hpp; PyTorch's expandable_segments:True)
// reserves one huge virtual address range and maps 2 MiB physical pages into it on
// demand (cuMemCreate, cuMemMap, cuMemSetAccess): a segment grows in place, and a
// freed block merges with its free neighbours instead of being stranded.
//
// Run:      build/current/chapters/03_expandable_allocator   (B = 32; N = 100, 200, 400)
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/03_expandable_allocator
//           --new-tokens 20   (the table's peak resv and frag against chapter 02's)
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

// Per layer, the keys and values of every position so far.
struct KvCache {
  std::vector<TypedBuffer<float>> keys;    ///< per layer, [B, H, length, D]
  std::vector<TypedBuffer<float>> values;  ///< per layer, [B, H, length, D]
  int length = 0;                          ///< L: positions cached
};

class Gpt2Decoder final : public Decoder {
 public:
  Gpt2Decoder(const DeviceModel& model, const DecoderOptions& options)
      : model_(model),
        config_(model.config()),
        eos_token_id_(options.eos_token_id),
        // NEW in chapter 03: physical pages mapped into one reserved virtual range, on demand.
        allocator_(make_device_allocator("expandable")),
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

    GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    KvCache cache;
    TypedBuffer<std::int32_t> next_tokens;
    int steps = 0;
    while (steps < max_new_tokens) {
      NvtxRange step_range("step");
      // Step 0 runs the whole prompt once and fills the cache; every
      // later step feeds only the tokens the step before chose, one per row.
      const TypedBuffer<float> step_logits = steps == 0 ? prefill(step_, sequence, B, T, cache)
                                                        : decode_step(step_, next_tokens, B, cache);
      next_tokens = allocate<std::int32_t>(B);
      launch_argmax_step(step_logits, next_tokens, greedy.state(), B, config_.vocab_size, steps,
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

 private:
  template <typename T>
  TypedBuffer<T> allocate(std::size_t count) {
    return TypedBuffer<T>(*allocator_, count, step_.stream());
  }

  /// GPT-2 over the prompts [B, T]: returns the logits of each row's last position, [B, V],
  /// and leaves every layer's keys and values of the T positions in `cache`.
  TypedBuffer<float> prefill(StepContext& step, const std::int32_t* tokens, int B, int T,
                             KvCache& cache) {
    NvtxRange prefill_range("prefill");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const TypedBuffer<float> hidden = allocate<float>(static_cast<std::size_t>(B) * T * C);
    launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(), hidden,
                              B, T, /*first_position=*/0, C, stream);
    layers(step, hidden, B * T, [&](int /*layer_index*/, const float* qkv) {
      // This layer's keys and values of positions 0 .. T - 1 stay.
      cache.keys.push_back(allocate<float>(static_cast<std::size_t>(B) * T * C));
      cache.values.push_back(allocate<float>(static_cast<std::size_t>(B) * T * C));
      launch_store_kv_sequence(qkv, cache.keys.back(), cache.values.back(), /*first_position=*/0, T,
                               /*capacity=*/T, B, H, C, stream);
      TypedBuffer<float> attended = allocate<float>(static_cast<std::size_t>(B) * T * C);
      launch_causal_attention(qkv, attended, B, T, H, C, stream);
      return attended;
    });
    cache.length = T;
    return lm_head(step, hidden, B, T);
  }

  // A decode step, the same GPT-2 over ONE token per row.
  /// GPT-2 over tokens [B], which sit at position L = cache.length: every layer appends
  /// their keys and values to the cache and attends over all L + 1 positions. Returns
  /// the logits, [B, V].
  TypedBuffer<float> decode_step(StepContext& step, const std::int32_t* tokens, int B,
                                 KvCache& cache) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const int L = cache.length;
    const TypedBuffer<float> hidden = allocate<float>(static_cast<std::size_t>(B) * C);
    launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(), hidden,
                              B, /*T=*/1, /*first_position=*/L, C, stream);
    layers(step, hidden, B, [&](int layer_index, const float* qkv) {
      grow_kv_cache(step, cache, layer_index, qkv, B, L);
      TypedBuffer<float> attended = allocate<float>(static_cast<std::size_t>(B) * C);
      // The query is read in place from the q third of qkv (rows 3C apart).
      launch_decode_attention(qkv, 3 * C, cache.keys[layer_index], cache.values[layer_index],
                              attended, B, /*L=*/L + 1, /*capacity=*/L + 1, H, C, stream);
      return attended;
    });
    cache.length = L + 1;
    return lm_head(step, hidden, B, /*T=*/1);
  }

  // The cache grows as Hugging Face's DynamicCache grows it
  // (torch.cat): new [B, H, L + 1, D] buffers from the allocator, the L cached positions
  // copied in and the step's keys and values written at L, in one launch; assigning the
  // new buffers over the old ones frees those. Keys and values of every layer, every
  // step: 2 * n_layer * B * L * C * 4 bytes read and written again.
  void grow_kv_cache(StepContext& step, KvCache& cache, int layer_index, const float* qkv, int B,
                     int L) {
    NvtxRange range("grow kv cache");
    const int C = config_.n_embd;
    const std::size_t size = static_cast<std::size_t>(B) * (L + 1) * C;
    TypedBuffer<float> keys = allocate<float>(size);
    TypedBuffer<float> values = allocate<float>(size);
    launch_grow_kv_cache(qkv, cache.keys[layer_index], cache.values[layer_index], keys, values, L,
                         B, config_.n_head, C, step.stream());
    cache.keys[layer_index] = std::move(keys);
    cache.values[layer_index] = std::move(values);
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
  return run_chapter(argc, argv, {"03_expandable_allocator", "expandable allocator"},
                     make_decoder<Gpt2Decoder>);
}
