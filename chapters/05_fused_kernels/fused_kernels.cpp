// chapters/05_fused_kernels/fused_kernels.cpp - rung 05: fused kernels, the compiler's
// job done by hand.
//
// Chapter 04's decode step launches 11 kernels per layer besides the ones cuBLASLt adds,
// most of them tiny: a GELU after the MLP's first matmul, a residual add whose sum the
// next LayerNorm reads straight back, a KV append, and an attention that scores every
// position of the cache, written or not. Each is a launch and a round trip through
// memory. Here they are fused, as torch.compile's code generator would fuse them:
//   * the GELU in the MLP matmul's epilogue (cuBLASLt), next to the bias that every
//     chapter already adds there: applied in registers before the product is stored;
//   * the residual add and the LayerNorm after it in one kernel (the sum is written once
//     and normalized in the same pass), the final LayerNorm included;
//   * one decode-attention kernel that appends the step's keys and values and attends
//     over the valid length only, the length split across blocks (flash-decoding).
// 7 launches per layer instead of 11. The LM head and the argmax stay as in chapter 04:
// the logits are already written once and read once, and the argmax kernel already
// records the EOS flags. The loop, the static cache and the device cursor are chapter
// 04's.
//
// Run:      build/current/chapters/05_fused_kernels              (B = 32; N = 100, 200, 400)
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/05_fused_kernels --new-tokens 20
//           (per layer: three matmuls with fused epilogues, fused_decode_attention_kernel,
//           layernorm_row_kernel twice; no gelu, residual_add or append kernels)
//
// Notation: B rows, T prompt tokens, N new tokens, capacity = T + N cached positions,
// L = p + 1 valid positions at position p, C = n_embd, H heads, D = C / H, V vocabulary.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_stream.hpp"
#include "common/nvtx.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using ladder::DeviceBuffer;
using ladder::LinearEpilogue;

// How the step's matmuls are timed alone: warm-up repeats, then timed repeats (median).
constexpr int kMatmulWarmupRepeats = 3;
constexpr int kMatmulTimedRepeats = 20;

// NEW in chapter 04: per layer, room for the keys and values of every position the run
// can reach, allocated once.
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
  DeviceBuffer expanded;   ///< [rows, 4C], the MLP's hidden layer, after the GELU
  DeviceBuffer last;       ///< [B, C], each row's last prompt position, after ln_f
  DeviceBuffer logits;     ///< [B, V]
};

// NEW in chapter 05: a LayerNorm's parameters, [C] each.
struct LayerNormParameters {
  const float* weight;
  const float* bias;
};

class FusedKernelsDecoder final : public ladder::Decoder {
 public:
  FusedKernelsDecoder(const ladder::DeviceModel& model, const ladder::DecoderOptions& options)
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
    // NEW in chapter 05: the fused attention's scratch (each split's partial softmax
    // state and a counter per head), allocated and zeroed once; every launch leaves the
    // counters at zero again, so the twelve layers and all the steps share it.
    DeviceBuffer attention_workspace =
        allocate<char>(ladder::fused_decode_attention_workspace_bytes(
            B, config_.n_head, config_.n_embd, cache.capacity));
    CUDA_CHECK(
        cudaMemsetAsync(attention_workspace.as<void>(), 0, attention_workspace.bytes(), stream));
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
          steps == 0
              ? prefill(sequence.as<std::int32_t>(), B, T, cache, activations)
              : decode_step(next_tokens.as<std::int32_t>(), cursor.as<ladder::DecodePosition>(), B,
                            cache, activations, attention_workspace.as<void>());
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

  // NEW in chapter 05: the yardstick for everything that is not a matmul. The 49
  // products of one decode step (four per layer and the LM head), with the same
  // cuBLASLt object, epilogues, weights and shapes as decode_step(), on scratch
  // activations, back to back on the loop's stream: nothing else runs between them.
  double matmul_seconds_per_step(int batch) override {
    const cudaStream_t stream = stream_.get();
    const int C = config_.n_embd;
    const Activations scratch = allocate_activations(batch, /*T=*/1);
    // The products' inputs, zeroed so that they read defined numbers.
    for (const DeviceBuffer* input : {&scratch.normed, &scratch.attended, &scratch.expanded})
      CUDA_CHECK(cudaMemsetAsync(input->as<void>(), 0, input->bytes(), stream));
    const auto step_matmuls = [&] {
      for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
        const ladder::DeviceLayer layer = model_.layer(layer_index);
        linear(scratch.normed.as<float>(), layer.qkv_weight, layer.qkv_bias,
               scratch.qkv.as<float>(), batch, C, 3 * C, LinearEpilogue::kBias);
        linear(scratch.attended.as<float>(), layer.attn_proj_weight, layer.attn_proj_bias,
               scratch.projected.as<float>(), batch, C, C, LinearEpilogue::kBias);
        linear(scratch.normed.as<float>(), layer.fc_weight, layer.fc_bias,
               scratch.expanded.as<float>(), batch, C, 4 * C, LinearEpilogue::kBiasGelu);
        linear(scratch.expanded.as<float>(), layer.mlp_proj_weight, layer.mlp_proj_bias,
               scratch.projected.as<float>(), batch, 4 * C, C, LinearEpilogue::kBias);
      }
      matmul_.lm_head(scratch.normed.as<float>(), model_.token_embedding(),
                      scratch.logits.as<float>(), batch, C, config_.vocab_size, stream);
    };
    return ladder::median_stream_seconds(stream, kMatmulWarmupRepeats, kMatmulTimedRepeats,
                                         step_matmuls);
  }

 private:
  template <typename T>
  DeviceBuffer allocate(std::size_t count) {
    return DeviceBuffer(*allocator_, count * sizeof(T), stream_.get());
  }

  // NEW in chapter 05: the cache is no longer zeroed. Chapter 04's attention read every
  // position, so the unused ones had to hold finite numbers; the fused attention never
  // reads a position that has not been written.
  StaticKvCache allocate_kv_cache(int B, int capacity) {
    StaticKvCache cache;
    cache.capacity = capacity;
    const std::size_t size = static_cast<std::size_t>(B) * capacity * config_.n_embd;
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      cache.keys.push_back(allocate<float>(size));
      cache.values.push_back(allocate<float>(size));
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
  /// in cache positions 0 .. T - 1. The fused epilogues and residual + LayerNorm kernels
  /// serve any number of rows; attention over the prompt stays chapter 04's (the fused
  /// attention is for one query per row).
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
    // NEW in chapter 05: only the first LayerNorm stands alone; every later one is fused
    // with the residual add before it.
    const ladder::DeviceLayer first_layer = model_.layer(0);
    ladder::launch_layernorm(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, rows,
                             C, eps, stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ladder::DeviceLayer layer = model_.layer(layer_index);
      {
        ladder::NvtxRange range("attention block");
        linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
               LinearEpilogue::kBias);
        // This layer's keys and values of positions 0 .. T - 1 stay, in the static cache.
        ladder::launch_store_kv_sequence(
            qkv, cache.keys[layer_index].as<float>(), cache.values[layer_index].as<float>(),
            /*first_position=*/0, T, cache.capacity, B, config_.n_head, C, stream);
        ladder::launch_causal_attention(qkv, attended, B, T, config_.n_head, C, stream);
        linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, rows, C, C,
               LinearEpilogue::kBias);
        // NEW in chapter 05: hidden += projected and normed = ln_2(hidden), one kernel.
        ladder::launch_residual_layernorm(hidden, projected, layer.ln_2_weight, layer.ln_2_bias,
                                          normed, rows, C, eps, stream);
      }
      {
        ladder::NvtxRange range("mlp block");
        // NEW in chapter 05: gelu(x W + b) in the matmul's epilogue, no GELU launch.
        linear(normed, layer.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
               LinearEpilogue::kBiasGelu);
        linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, rows, 4 * C, C,
               LinearEpilogue::kBias);
        // NEW in chapter 05: hidden += projected, normalized for what comes next.
        const LayerNormParameters next = layernorm_after(layer_index);
        ladder::launch_residual_layernorm(hidden, projected, next.weight, next.bias, normed, rows,
                                          C, eps, stream);
      }
    }

    ladder::NvtxRange range("lm head");
    // NEW in chapter 05: ln_f already ran, fused with the last residual add, over every
    // position (B x T rows, a negligible cost once per generation); only each row's last
    // position predicts the next token.
    float* last = activations.last.as<float>();
    CUDA_CHECK(cudaMemcpy2DAsync(
        last, sizeof(float) * C, normed + static_cast<std::size_t>(T - 1) * C,
        sizeof(float) * C * T, sizeof(float) * C, B, cudaMemcpyDeviceToDevice, stream));
    float* logits = activations.logits.as<float>();
    matmul_.lm_head(last, model_.token_embedding(), logits, B, C, config_.vocab_size, stream);
    return logits;
  }

  // NEW in chapter 04: the decode step reads its position from the cursor on the device.
  /// GPT-2 over tokens [B], which sit at position p = cursor->position: every layer
  /// writes their keys and values at p of the static cache and attends over positions
  /// 0 .. p. Returns the logits, [B, V] (in activations.logits).
  float* decode_step(const std::int32_t* tokens, const ladder::DecodePosition* cursor, int B,
                     StaticKvCache& cache, const Activations& activations,
                     void* attention_workspace) {
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
    // NEW in chapter 05: only the first LayerNorm stands alone.
    const ladder::DeviceLayer first_layer = model_.layer(0);
    ladder::launch_layernorm(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, B, C,
                             eps, stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ladder::DeviceLayer layer = model_.layer(layer_index);
      float* keys = cache.keys[layer_index].as<float>();
      float* values = cache.values[layer_index].as<float>();
      {
        ladder::NvtxRange range("attention block");
        linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, B, C, 3 * C, LinearEpilogue::kBias);
        // NEW in chapter 05: append k, v at p and attend over the L = p + 1 valid positions
        // only, in one kernel; positions after p are never read.
        ladder::launch_fused_decode_attention(qkv, keys, values, cursor, cache.capacity, attended,
                                              attention_workspace, B, H, C, stream);
        linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, B, C, C,
               LinearEpilogue::kBias);
        // NEW in chapter 05: hidden += projected and normed = ln_2(hidden), one kernel.
        ladder::launch_residual_layernorm(hidden, projected, layer.ln_2_weight, layer.ln_2_bias,
                                          normed, B, C, eps, stream);
      }
      {
        ladder::NvtxRange range("mlp block");
        // NEW in chapter 05: gelu(x W + b) in the matmul's epilogue, no GELU launch.
        linear(normed, layer.fc_weight, layer.fc_bias, expanded, B, C, 4 * C,
               LinearEpilogue::kBiasGelu);
        linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, B, 4 * C, C,
               LinearEpilogue::kBias);
        // NEW in chapter 05: hidden += projected, normalized for what comes next.
        const LayerNormParameters next = layernorm_after(layer_index);
        ladder::launch_residual_layernorm(hidden, projected, next.weight, next.bias, normed, B, C,
                                          eps, stream);
      }
    }

    ladder::NvtxRange range("lm head");
    // NEW in chapter 05: normed already holds ln_f(hidden), fused with the last residual add.
    float* logits = activations.logits.as<float>();
    matmul_.lm_head(normed, model_.token_embedding(), logits, B, C, config_.vocab_size, stream);
    return logits;
  }

  // NEW in chapter 05: the epilogue is the caller's choice, so that c_fc can take the GELU.
  /// out = x W + b (kBias) or gelu(x W + b) (kBiasGelu), one cuBLASLt call: the epilogue
  /// is applied in registers before the product is stored.
  void linear(const float* x, const float* weight, const float* bias, float* out, int rows,
              int in_features, int out_features, LinearEpilogue epilogue) {
    matmul_.linear(x, weight, bias, out, rows, in_features, out_features, epilogue, stream_.get());
  }

  // NEW in chapter 05: the LayerNorm that follows layer `layer_index`'s MLP, fused with
  // its residual add: the next layer's ln_1, or ln_f after the last layer.
  LayerNormParameters layernorm_after(int layer_index) const {
    if (layer_index + 1 == config_.n_layer) return {model_.ln_f_weight(), model_.ln_f_bias()};
    const ladder::DeviceLayer next_layer = model_.layer(layer_index + 1);
    return {next_layer.ln_1_weight, next_layer.ln_1_bias};
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
  return ladder::run_chapter(argc, argv, {"05_fused_kernels", "fused kernels"},
                             ladder::make_decoder<FusedKernelsDecoder>);
}
