// chapters/06_stream_interleaving/stream_interleaving.cpp - rung 06: two CUDA streams
// in ping-pong, so that the host checks step i - 1's flag while the GPU runs step i.
//
// Chapter 05 still ends every step the plain way: copy the "every row finished" flag
// to the host and wait for it. While the host wakes up, reads the flag and enqueues
// the next step's first kernels, the GPU has nothing to do. Here the host enqueues
// step i first and only then waits for step i - 1 and reads its flag: the GPU finds
// step i queued the moment step i - 1 ends. Step i runs on stream i % 2, behind an
// event recorded at the end of step i - 1 on the other stream; each step copies its
// flag into its stream's slot of pinned host memory without the host waiting, and
// records the event the host waits for. When step i - 1's flag says stop, step i has
// already run ahead: it is speculative, and nothing it produced is kept, so the tokens
// and the stop step equal every other chapter's. The kernels are chapter 05's.
//
// Run:      build/current/chapters/06_stream_interleaving        (B = 32; N = 100, 200, 400)
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/06_stream_interleaving
//           --new-tokens 20 --batch 1   (the steps alternate between two streams, each
//           starting where the other ends; the "check previous step" ranges on the host
//           overlap the next step on the GPU)
//
// Notation: B rows, T prompt tokens, N new tokens, capacity = T + N cached positions,
// L = p + 1 valid positions at position p, C = n_embd, H heads, D = C / H, V vocabulary.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/greedy_decoding.hpp"
#include "common/nvtx.hpp"
#include "common/pinned_flag.hpp"
#include "common/step_context.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

// Room for the keys and values of every position the run can reach,
// every layer's in one block, allocated once.
struct StaticKvCache {
  TypedBuffer<float> keys;       ///< [n_layer, B, H, capacity, D]
  TypedBuffer<float> values;     ///< [n_layer, B, H, capacity, D]
  int capacity = 0;              ///< T + N positions
  std::size_t layer_floats = 0;  ///< B * capacity * C: one layer's keys (or values)
  // The fused attention's scratch (each split's partial softmax state
  // and a counter per head), zeroed once; every launch leaves the counters at zero
  // again, so the twelve layers and all the steps share it.
  TypedBuffer<char> attention_workspace;

  float* layer_keys(int layer_index) const { return keys + layer_index * layer_floats; }
  float* layer_values(int layer_index) const { return values + layer_index * layer_floats; }
};

// Every activation of a step, allocated once, sized for the
// prefill's B x T rows; a decode step uses the first B rows.
struct Activations {
  TypedBuffer<float> hidden;     ///< [rows, C], the residual stream
  TypedBuffer<float> normed;     ///< [rows, C], a LayerNorm's output
  TypedBuffer<float> qkv;        ///< [rows, 3C]
  TypedBuffer<float> attended;   ///< [rows, C]
  TypedBuffer<float> projected;  ///< [rows, C], c_proj's output (attention and MLP)
  TypedBuffer<float> expanded;   ///< [rows, 4C], the MLP's hidden layer, after the GELU
  TypedBuffer<float> last;       ///< [B, C], each row's last prompt position, after ln_f
  TypedBuffer<float> logits;     ///< [B, V]
};

// A LayerNorm's parameters, [C] each.
struct LayerNormParameters {
  const float* weight;
  const float* bias;
};

// NEW in chapter 06: what each of the two streams owns. Step i runs on stream i % 2.
struct StepStream {
  StepStream(DeviceAllocator& allocator, bool allow_tf32)
      : context(allocator, allow_tf32), step_done(cudaEventDisableTiming) {}

  /// The stream, with its own cuBLASLt and workspace.
  StepContext context;
  /// Recorded at the end of every step this stream runs: the next step, on the other
  /// stream, waits for it, and so does the host before it reads all_finished.
  CudaEvent step_done;
  /// The "every row finished" flag of the last step this stream ran, in pinned host
  /// memory (common/pinned_flag.hpp): the copy into it does not make the host wait.
  PinnedFlag all_finished;
};

class Gpt2Decoder final : public Decoder {
 public:
  Gpt2Decoder(const DeviceModel& model, const DecoderOptions& options)
      : model_(model),
        config_(model.config()),
        eos_token_id_(options.eos_token_id),
        // The default caching allocator: nothing grows and nothing is allocated in
        // the loop, so there is nothing for it to strand.
        allocator_(make_device_allocator("caching")),
        // NEW in chapter 06: two streams, each with its own cuBLASLt and workspace.
        streams_{{{*allocator_, options.allow_tf32}, {*allocator_, options.allow_tf32}}} {}

  DeviceAllocator& allocator() override { return *allocator_; }

  GenerationOutput generate(const PromptBatch& prompts, int max_new_tokens,
                            LogitsRecorder& logits) override {
    const int B = prompts.batch;
    const int T = prompts.length;
    // The setup runs on the first stream, which step 0 runs on too.
    const cudaStream_t stream = streams_[0].context.stream();

    // The prompts, [B, T]; only the prefill reads them.
    const TypedBuffer<std::int32_t> sequence = upload_prompt_tokens(*allocator_, prompts, stream);
    const GreedyBuffers greedy(*allocator_, prompts, max_new_tokens, eos_token_id_, stream);
    // Everything the loop touches is allocated here, once, for the
    // longest the run can get (Hugging Face's StaticCache: max_cache_len = T + N).
    const StaticKvCache cache = allocate_kv_cache(B, T + max_new_tokens, stream);
    const Activations activations = allocate_activations(B, T);
    const TypedBuffer<std::int32_t> next_tokens = allocate<std::int32_t>(B);
    // Where the loop stands lives on the device. Step 0 (the prefill)
    // predicts from the prompt's last token, at position T - 1; every argmax advances it.
    const TypedBuffer<DecodePosition> cursor = allocate<DecodePosition>(1);
    const DecodePosition start{/*step=*/0, /*position=*/T - 1};
    CUDA_CHECK(cudaMemcpyAsync(cursor, &start, sizeof(start), cudaMemcpyHostToDevice, stream));

    GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    // NEW in chapter 06: the host stays one step ahead of its check. Step i is enqueued
    // before the host waits for step i - 1, so the GPU always has a step queued.
    int steps = max_new_tokens;  // unless a flag stops the loop sooner
    int last_enqueued = 0;
    for (int step = 0; step < max_new_tokens; ++step) {
      StepStream& current = streams_[step % 2];
      const StepStream& previous = streams_[(step + 1) % 2];
      {
        NvtxRange step_range("step");
        const cudaStream_t step_stream = current.context.stream();
        // NEW in chapter 06: step i starts when step i - 1, on the other stream, has ended.
        // Both streams use the same buffers (cache, activations, cursor, flags, the
        // attention workspace), which is safe only because of this wait: no two steps
        // ever run at the same time, and each sees everything the one before wrote.
        if (step > 0) CUDA_CHECK(cudaStreamWaitEvent(step_stream, previous.step_done.get(), 0));
        // Step 0 runs the whole prompt once and fills the cache; every
        // later step feeds only the tokens the step before chose, one per row.
        const float* step_logits =
            step == 0 ? prefill(current.context, sequence, B, T, cache, activations)
                      : decode_step(current.context, next_tokens, cursor, B, cache, activations);
        // The argmax takes the step from the cursor and advances it.
        launch_argmax_step(step_logits, next_tokens, greedy.state(), cursor, B, config_.vocab_size,
                           step_stream);
        // Every enqueued step is recorded, in step order; the runner keeps the first `steps`.
        logits.record(step_logits, B, config_.vocab_size, step_stream);
        // NEW in chapter 06: the flag goes to this stream's pinned slot, and the event marks
        // the end of the step; the host does not wait for either here.
        CUDA_CHECK(cudaMemcpyAsync(current.all_finished.get(), greedy.all_finished(),
                                   sizeof(std::int32_t), cudaMemcpyDeviceToHost, step_stream));
        CUDA_CHECK(cudaEventRecord(current.step_done.get(), step_stream));
        last_enqueued = step;
      }
      if (step == 0) continue;

      // NEW in chapter 06: only now, with step i queued behind it, the host waits for step
      // i - 1 and reads its flag. Set: step i - 1 was the last, and step i, which ran
      // ahead, is discarded. Step i + 1 reuses this slot, and is not enqueued yet.
      NvtxRange check_range("check previous step");
      CUDA_CHECK(cudaEventSynchronize(previous.step_done.get()));
      ++output.host_syncs;
      if (*previous.all_finished.get() != 0) {
        steps = step;
        break;
      }
    }

    output.loop_allocations = allocator_->stats().allocations - allocations_before_loop;
    output.steps = steps;
    output.steps_launched = last_enqueued + 1;  // the trace divides by these, not by `steps`
    // NEW in chapter 06: the last step enqueued (the speculative one, after an early stop)
    // must end before the tokens are read and the buffers go back to the allocator. Only
    // the `steps` real columns are read; the speculative step's column stays on the device.
    CUDA_CHECK(cudaStreamWaitEvent(stream, streams_[last_enqueued % 2].step_done.get(), 0));
    output.tokens = greedy.download_tokens(steps, stream);
    return output;
  }

  // The table's yardstick: this step's 49 products alone (common/step_context.hpp).
  // NEW in chapter 06: on the first stream, with its cuBLASLt.
  double matmul_seconds_per_step(int batch) override {
    return decode_matmul_seconds(model_, streams_[0].context, *allocator_, batch,
                                 LinearEpilogue::kBiasGelu);
  }

 private:
  template <typename T>
  TypedBuffer<T> allocate(std::size_t count) {
    // NEW in chapter 06: every buffer is taken on the first stream and used by both.
    return TypedBuffer<T>(*allocator_, count, streams_[0].context.stream());
  }

  // The cache is not zeroed: the fused attention never reads a position that
  // has not been written.
  StaticKvCache allocate_kv_cache(int B, int capacity, cudaStream_t stream) {
    StaticKvCache cache;
    cache.capacity = capacity;
    cache.layer_floats = static_cast<std::size_t>(B) * capacity * config_.n_embd;
    cache.keys = allocate<float>(config_.n_layer * cache.layer_floats);
    cache.values = allocate<float>(config_.n_layer * cache.layer_floats);
    cache.attention_workspace = allocate<char>(
        fused_decode_attention_workspace_bytes(B, config_.n_head, config_.n_embd, capacity));
    CUDA_CHECK(
        cudaMemsetAsync(cache.attention_workspace, 0, cache.attention_workspace.bytes(), stream));
    return cache;
  }

  // One buffer per kind of activation, big enough for the prefill.
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
  /// in cache positions 0 .. T - 1. Its attention stays chapter 04's: the fused attention
  /// is for one query per row.
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

  /// GPT-2 over tokens [B], which sit at position p = cursor->position: every layer
  /// writes their keys and values at p of the static cache and attends over positions
  /// 0 .. p. Returns the logits, [B, V] (in activations.logits).
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
      // Append k, v at p and attend over the L = p + 1 valid positions
      // only, in one kernel; positions after p are never read.
      launch_fused_decode_attention(qkv, keys, values, cursor, cache.capacity, attended,
                                    cache.attention_workspace, B, H, C, stream);
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
    // Only the first LayerNorm stands alone; every later one is fused
    // with the residual add before it.
    const DeviceLayer first_layer = model_.layer(0);
    launch_layernorm(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, rows, C, eps,
                     stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const DeviceLayer layer = model_.layer(layer_index);
      {
        NvtxRange range("attention block");
        step.linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
                    LinearEpilogue::kBias);
        attend(layer_index, qkv, attended);
        step.linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, rows, C, C,
                    LinearEpilogue::kBias);
        // hidden += projected and normed = ln_2(hidden), one kernel.
        launch_residual_layernorm(hidden, projected, layer.ln_2_weight, layer.ln_2_bias, normed,
                                  rows, C, eps, stream);
      }
      {
        NvtxRange range("mlp block");
        // gelu(x W + b) in the matmul's epilogue, no GELU launch.
        step.linear(normed, layer.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
                    LinearEpilogue::kBiasGelu);
        step.linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, rows, 4 * C, C,
                    LinearEpilogue::kBias);
        // hidden += projected, normalized for what comes next.
        const LayerNormParameters next = layernorm_after(layer_index);
        launch_residual_layernorm(hidden, projected, next.weight, next.bias, normed, rows, C, eps,
                                  stream);
      }
    }
  }

  /// The tied LM head over each row's last position of ln_f(residual stream)
  /// (activations.normed, [B, T, C]): returns the logits, [B, V] (in activations.logits).
  float* lm_head(StepContext& step, const Activations& activations, int B, int T) {
    NvtxRange range("lm head");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    // ln_f already ran, fused with the last residual add (in the
    // prefill over every position, a negligible cost once per generation); only each
    // row's last position predicts the next token.
    const float* last = activations.normed;
    if (T > 1) {
      CUDA_CHECK(cudaMemcpy2DAsync(activations.last, sizeof(float) * C,
                                   activations.normed + static_cast<std::size_t>(T - 1) * C,
                                   sizeof(float) * C * T, sizeof(float) * C, B,
                                   cudaMemcpyDeviceToDevice, stream));
      last = activations.last;
    }
    step.lm_head(last, model_.token_embedding(), activations.logits, B, C, config_.vocab_size);
    return activations.logits;
  }

  // The LayerNorm that follows layer `layer_index`'s MLP, fused with
  // its residual add: the next layer's ln_1, or ln_f after the last layer.
  LayerNormParameters layernorm_after(int layer_index) const {
    if (layer_index + 1 == config_.n_layer) return {model_.ln_f_weight(), model_.ln_f_bias()};
    const DeviceLayer next_layer = model_.layer(layer_index + 1);
    return {next_layer.ln_1_weight, next_layer.ln_1_bias};
  }

  const DeviceModel& model_;
  const Gpt2Config config_;
  const int eos_token_id_;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::array<StepStream, 2> streams_;
};

}  // namespace

int main(int argc, char** argv) {
  return run_chapter(argc, argv, {"06_stream_interleaving", "stream interleaving"},
                     make_decoder<Gpt2Decoder>);
}
